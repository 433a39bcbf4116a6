// tile_order.cuh: the order in which chapter 12's GEMMs take their output tiles.
#pragma once

// The tile of index b when consecutive indices walk down groups of GROUP_M row tiles, then across: blocks
// running at the same time share GROUP_M row panels of A and a few column panels of B in L2 (sgemm v9 does
// the same for fp32).
__device__ __forceinline__ void grouped_tile(int b, int tiles_m, int tiles_n, int group_m, int& tile_m,
                                             int& tile_n) {
    const int per_group = group_m * tiles_n;
    const int first_m = (b / per_group) * group_m;
    const int rows = min(tiles_m - first_m, group_m);      // the last group may be shorter
    tile_m = first_m + (b % per_group) % rows;
    tile_n = (b % per_group) / rows;
}
