// v01_mma.cu: chapter 12, hgemm v1. v0 without WMMA: mma.sync.m16n8k16 with fragments loaded by ldmatrix
// (A) and ldmatrix.trans (B, which is [K][N] in memory), the registers' layout known (PTX ISA "Matrix
// Fragments for mma.m16n8k16"), so the epilogue stores straight from the accumulators. Tiles are stored
// row-major in shared memory: ldmatrix's 8 row addresses of one matrix fall in the same banks
// (4-way conflicts on A's 64-byte rows, 8-way on B's 256-byte rows); v2 removes them.
#include "hgemm_common.cuh"

// [[snippet: hgemm_v1]]
template <int BM, int BN, int BK, int WM, int WN, bool VEC>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32)
hgemm_v1_mma(int M, int N, int K, const bf16* __restrict__ A, const bf16* __restrict__ B, bf16* __restrict__ C) {
    constexpr int NT = (BM / WM) * (BN / WN) * 32;
    using LA = RowMajor<BK>;
    using LB = RowMajor<BN>;
    __shared__ __align__(16) bf16 As[BM * BK];   // [BM][BK]
    __shared__ __align__(16) bf16 Bs[BK * BN];   // [BK][BN]
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
