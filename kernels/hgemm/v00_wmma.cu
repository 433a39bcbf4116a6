// v00_wmma.cu: chapter 12, hgemm v0. Tensor cores through the portable WMMA API (nvcuda::wmma, <mma.h>):
// each warp holds WM/16 x WN/16 accumulator fragments of 16 x 16 and multiplies 16 x 16 x 16 blocks of
// the A and B tiles staged in shared memory. Fragment layouts are opaque: the epilogue goes through a
// per-warp float scratch tile in shared memory, from which lanes store the elements inside C.
//
// C [M][N] = A [M][K] @ B [K][N], row-major bf16, fp32 accumulation. One block per BM x BN tile of C
// (grid x: column tiles, y: row tiles). VEC: K and N multiples of 8 and A, B 16-byte aligned (the plan
// decides); otherwise the loads test every element.
#include <mma.h>
#include "hgemm_common.cuh"

// [[snippet: hgemm_v0]]
template <int BM, int BN, int BK, int WM, int WN, bool VEC>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32)
hgemm_v0_wmma(int M, int N, int K, const bf16* __restrict__ A, const bf16* __restrict__ B, bf16* __restrict__ C) {
    using namespace nvcuda;
    constexpr int NT = (BM / WM) * (BN / WN) * 32, FM = WM / 16, FN = WN / 16;
    // wmma::load_matrix_sync wants 32-byte aligned fragment pointers: rows of BK, BN elements keep them so
    __shared__ __align__(32) bf16 As[BM * BK];                 // [BM][BK]
    __shared__ __align__(32) bf16 Bs[BK * BN];                 // [BK][BN]
    __shared__ __align__(32) float scratch[NT / 32][16 * 16];  // [warp][16][16], the epilogue's staging
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int wm0 = (warp / (BN / WN)) * WM, wn0 = (warp % (BN / WN)) * WN;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[FM][FN];
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

    for (int k0 = 0; k0 < K; k0 += BK) {
        load_tile_sync<BM, BK, NT, RowMajor<BK>, VEC>(As, A, M, K, m0, k0);
        load_tile_sync<BK, BN, NT, RowMajor<BN>, VEC>(Bs, B, K, N, k0, n0);
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a[FM];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> b[FN];
#pragma unroll
            for (int i = 0; i < FM; ++i) wmma::load_matrix_sync(a[i], As + (wm0 + 16 * i) * BK + kk, BK);
#pragma unroll
            for (int j = 0; j < FN; ++j) wmma::load_matrix_sync(b[j], Bs + kk * BN + wn0 + 16 * j, BN);
#pragma unroll
            for (int i = 0; i < FM; ++i)
#pragma unroll
                for (int j = 0; j < FN; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
        }
        __syncthreads();   // before the next tile overwrites As and Bs
    }

    float* mine = scratch[warp];
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j) {
            wmma::store_matrix_sync(mine, acc[i][j], 16, wmma::mem_row_major);
            __syncwarp();
            for (int e = lane; e < 256; e += 32) {
                const int row = m0 + wm0 + 16 * i + e / 16, col = n0 + wn0 + 16 * j + e % 16;
                if (row < M && col < N) C[row * N + col] = __float2bfloat16(mine[e]);
            }
            __syncwarp();  // every lane has read the scratch before the next fragment lands in it
        }
}
// [[/snippet]]
