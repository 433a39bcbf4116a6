// epilogue.cuh: the collective epilogue of chapter 12's fastest GEMM (CUTLASS 3.x:
// include/cutlass/epilogue/collective/sm90_epilogue_tma_warpspecialized.hpp): each consumer warpgroup rounds
// its 64 x BN accumulators to bf16 into its own 64 x 64 staging tile (128-byte swizzled) and one of its threads
// stores the tile to C with TMA, which clips at C's edges. The staging tiles follow the stage ring in shared
// memory.
#pragma once
#include "hopper_common.cuh"
#include "scheduler.cuh"

namespace gemm_sm90 {

template <int BM, int BN>
struct EpilogueTmaStore {
    static constexpr int STAGING_BYTES = C_CHUNK_BYTES;   // per consumer warpgroup
    bf16* staging;                                         // [consumer warpgroups][64 x 64]

    __device__ __forceinline__ void store(const float (&acc)[BN / 2], const TmaDescriptor* map_c, Tile tile,
                                          int consumer, bool signals) const {
        store_wgmma_tile_tma<BN>(acc, staging + consumer * 64 * 64, map_c, tile.m * BM + 64 * consumer, tile.n * BN,
                                 signals);
    }
    // C is written before the block retires: its last stores may still be reading the staging tiles.
    __device__ __forceinline__ void drain(bool signals) const {
        if (signals) tma_store_wait_all();
    }
};

}  // namespace gemm_sm90
