// v02_swizzle.cu: chapter 12, hgemm v2. v1 with both shared-memory tiles XOR-swizzled (Swizzled in
// hgemm_common.cuh): the 8 rows each ldmatrix phase reads land in 8 different bank groups, so A's 4-way
// and B's 8-way conflicts go, at the cost of one XOR per address. Nothing else changes.
#include "hgemm_common.cuh"

// [[snippet: hgemm_v2]]
template <int BM, int BN, int BK, int WM, int WN, bool VEC>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32)
hgemm_v2_swizzle(int M, int N, int K, const bf16* __restrict__ A, const bf16* __restrict__ B, bf16* __restrict__ C) {
    constexpr int NT = (BM / WM) * (BN / WN) * 32;
    using LA = Swizzled<BK>;
    using LB = Swizzled<BN>;
    __shared__ __align__(16) bf16 As[BM * BK];   // [BM][BK], swizzled
    __shared__ __align__(16) bf16 Bs[BK * BN];   // [BK][BN], swizzled
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int wm0 = (warp / (BN / WN)) * WM, wn0 = (warp % (BN / WN)) * WN;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;

    float acc[WM / 16][WN / 8][4] = {};           // [m16 tile][n8 tile][c0..c3]
    for (int k0 = 0; k0 < K; k0 += BK) {
        load_tile_sync<BM, BK, NT, LA, VEC>(As, A, M, K, m0, k0);
        load_tile_sync<BK, BN, NT, LB, VEC>(Bs, B, K, N, k0, n0);
        __syncthreads();
        warp_tile_mma<BK, WM, WN, LA, LB>(acc, As, Bs, wm0, wn0, lane);
        __syncthreads();
    }
    store_tile<WM, WN, VEC>(acc, C, M, N, m0 + wm0, n0 + wn0, lane);
}
// [[/snippet]]
