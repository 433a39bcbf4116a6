// v09_tuned.cu: sgemm_v9_tuned, v8's body (warptile.cuh) in two kinds of instance: where the tiles divide the
// shape, slices load through iterator.cuh (no bounds tests, pointers moved on per slice); elsewhere through
// v8's stage.cuh. The host's plan picks the instance. Every tile size is a tuning parameter, plus two knobs:
// - MIN_BLOCKS in __launch_bounds__: how many blocks per SM ptxas must leave room for (it caps registers
//   per thread at 65536 / (threads * MIN_BLOCKS)), trading registers for occupancy;
// - GROUP_M, the order blocks take tiles in: v8's blocks run row tile by row tile, so the blocks in flight
//   share one row panel of A but sweep all of B; here consecutive blocks walk down a group of GROUP_M row
//   tiles before moving one column right, so those in flight share GROUP_M row panels of A and a few column
//   panels of B, and more of both stays in L2 (GROUP_M = 1 is v8's order).
// The configurations and the sweep are in kernels/sgemm/__init__.py (V9_CONFIGS, tune, tuned_config).
//
// C = alpha * A @ B + beta * C, row-major fp32, any M, N, K >= 1 (zero-filled tiles, predicated stores);
// beta == 0 never reads C.
#include "iterator.cuh"
#include "warptile.cuh"

// [[snippet: sgemm_v9]]
// A one-dimensional grid over gridDim.x = tiles_m * tiles_n blocks; block b takes the tile GROUP_M-ordered.
// WHOLE: the plan found BM | M, BN | N and BK | K on the 16-byte path, so no load can leave a matrix.
template <int BM, int BN, int BK, int WM, int WN, int WNITER, int MIN_BLOCKS, int GROUP_M, bool VEC, bool WHOLE>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32, MIN_BLOCKS)
sgemm_v9_tuned(int M, int N, int K, float alpha, const float* __restrict__ A,
               const float* __restrict__ B, float beta, float* __restrict__ C) {
    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    const int b = blockIdx.x;
    const int per_group = GROUP_M * tiles_n;         // blocks in one group of GROUP_M row tiles
    const int first_m = (b / per_group) * GROUP_M;
    const int rows = min(tiles_m - first_m, GROUP_M);   // the last group may be shorter
    const int tile_m = first_m + (b % per_group) % rows;
    const int tile_n = (b % per_group) / rows;
    if constexpr (WHOLE)                             // no tests: iterator.cuh
        warptile_gemm<BM, BN, BK, WM, WN, WNITER, VEC, InteriorLoads>(M, N, K, alpha, A, B, beta, C, tile_m, tile_n);
    else                                             // every load tested: v8's stage.cuh
        warptile_gemm<BM, BN, BK, WM, WN, WNITER, VEC, Stage>(M, N, K, alpha, A, B, beta, C, tile_m, tile_n);
}
// [[/snippet]]
