// v08_warptile.cu: sgemm_v8_warptile, v7 with warp tiling: block tile -> warp tiles -> 4 x 4 thread tiles
// (warptile.cuh holds the body and says what changes). Default tiles: 128 x 128 x 8 blocks of 256 threads,
// 8 warps of 64 x 32 (2 x 2 sub-tiles of 32 x 16), 8 x 8 results per thread, as v7.
//
// C = alpha * A @ B + beta * C, row-major fp32, any M, N, K >= 1 (zero-filled tiles, predicated stores);
// beta == 0 never reads C.
#include "warptile.cuh"

// [[snippet: sgemm_v8]]
// blockIdx.x picks the column tile, blockIdx.y the row tile, as in every version since v2. Two blocks per SM
// in __launch_bounds__: left alone, ptxas gives the default tile 129 registers, one over what lets two blocks
// of 256 threads share the SM's 64 K registers, and occupancy would halve to 8 warps.
template <int BM, int BN, int BK, int WM, int WN, int WNITER, bool VEC>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32, 2)
sgemm_v8_warptile(int M, int N, int K, float alpha, const float* __restrict__ A,
                  const float* __restrict__ B, float beta, float* __restrict__ C) {
    warptile_gemm<BM, BN, BK, WM, WN, WNITER, VEC>(M, N, K, alpha, A, B, beta, C, blockIdx.y, blockIdx.x);
}
// [[/snippet]]
