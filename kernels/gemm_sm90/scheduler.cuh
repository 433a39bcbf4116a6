// scheduler.cuh: which output tiles a persistent CTA computes, in what order (CUTLASS 3.x: the tile scheduler,
// include/cutlass/gemm/kernel/sm90_tile_scheduler.hpp). Clusters of CTAS CTAs take vertically adjacent tiles
// (rows CTAS p .. CTAS p + CTAS - 1 of the tile grid, one column), so the cluster shares its B tile; the
// clusters walk the tile pairs in chapter 12's grouped order, GROUP_M pair-rows at a time, striding by the
// number of clusters resident on the GPU.
#pragma once
#include "tile_order.cuh"

namespace gemm_sm90 {

struct Tile {
    int m, n;      // tile coordinates in the grid of BM x BN output tiles
};

template <int BM, int BN, int GROUP_M, int CTAS>
struct PersistentScheduler {
    int tiles_m, tiles_n, groups, group, rank;

    __device__ __forceinline__ PersistentScheduler(int M, int N, unsigned cta_rank)
        : tiles_m((M + BM - 1) / BM), tiles_n((N + BN - 1) / BN),
          groups((tiles_m + CTAS - 1) / CTAS * tiles_n),          // a group past M's last tile loads zeros
          group(blockIdx.x / CTAS), rank(cta_rank) {}

    __device__ __forceinline__ bool valid() const { return group < groups; }
    __device__ __forceinline__ Tile tile() const {
        int group_m, tile_n;
        grouped_tile(group, (tiles_m + CTAS - 1) / CTAS, tiles_n, GROUP_M, group_m, tile_n);
        return {CTAS * group_m + rank, tile_n};
    }
    __device__ __forceinline__ void advance() { group += gridDim.x / CTAS; }
};

}  // namespace gemm_sm90
