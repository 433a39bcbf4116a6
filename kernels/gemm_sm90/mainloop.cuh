// mainloop.cuh: the collective mainloop of chapter 12's fastest GEMM (CUTLASS 3.x:
// include/cutlass/gemm/collective/sm90_mma_tma_gmma_ss_warpspecialized.hpp, "SS": both operands in shared
// memory). The producer half fills the stage ring with TMA: per stage a BM x 64 box of A and BN/64 boxes of
// 64 x 64 of B, B split over the CTAS CTAs of a cluster and multicast into all of them. The consumer half runs
// one warpgroup's 64 rows of wgmmas per stage, keeps one wgmma group in flight, and releases a stage once the
// group that read it has completed.
#pragma once
#include "hopper_common.cuh"
#include "pipeline.cuh"
#include "scheduler.cuh"

namespace gemm_sm90 {

template <int BM, int BN, int STAGES, int CONSUMERS, int CTAS>
struct MainloopTmaWgmma {
    static constexpr int A_BYTES = BM * HOPPER_BK * 2, B_BYTES = HOPPER_BK * BN * 2, STAGE_BYTES = A_BYTES + B_BYTES;
    static constexpr int B_BOXES = BN / 64;
    static_assert(B_BOXES % CTAS == 0, "every CTA of the cluster loads the same number of B's boxes");
    using Pipeline = TmaPipeline<STAGES, CONSUMERS, CTAS>;
    using State = PipeState<STAGES>;

    unsigned char* stages;   // [STAGES][A: BM x 64 | B: BN/64 x (64 x 64)], 128-byte swizzled, 1024-byte aligned

    __device__ __forceinline__ bf16* a_stage(int s) const { return reinterpret_cast<bf16*>(stages + s * STAGE_BYTES); }
    __device__ __forceinline__ bf16* b_stage(int s) const {
        return reinterpret_cast<bf16*>(stages + s * STAGE_BYTES + A_BYTES);
    }

    // Producer (one thread): the k-tiles of one output tile into the ring, from `st` on.
    __device__ __forceinline__ void load(Pipeline& pipe, State& st, const TmaDescriptor* map_a,
                                         const TmaDescriptor* map_b, Tile tile, int tiles_k, unsigned rank) const {
        for (int kt = 0; kt < tiles_k; ++kt, st.advance()) {
            unsigned long long* full = pipe.producer_acquire(st, STAGE_BYTES);   // A, and all of B (part from peers)
            tma_load_2d(a_stage(st.index), map_a, kt * HOPPER_BK, tile.m * BM, full);
#pragma unroll
            for (int b = rank * B_BOXES / CTAS; b < (rank + 1) * B_BOXES / CTAS; ++b) {
                bf16* dst = b_stage(st.index) + b * 64 * 64;
                const int col = tile.n * BN + 64 * b, row = kt * HOPPER_BK;
                if constexpr (CTAS == 1) tma_load_2d(dst, map_b, col, row, full);
                else tma_load_2d_multicast(dst, map_b, col, row, full, (1u << CTAS) - 1);
            }
        }
    }

    // Consumer warpgroup (all 128 threads): acc = A [rows .. rows + 64) of the tile x B over K, from `st` on.
    // `signals` is the warpgroup's one thread that releases stages.
    __device__ __forceinline__ void mma(Pipeline& pipe, State& st, float (&acc)[BN / 2], int rows, int tiles_k,
                                        bool signals, unsigned peer) const {
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) acc[i] = 0.f;
        State previous = st;
        for (int kt = 0; kt < tiles_k; ++kt, st.advance()) {
            pipe.consumer_wait(st);
            wgmma_stage<BN>(acc, a_stage(st.index), b_stage(st.index), rows);
            wgmma_wait<1>();                              // every group but this stage's is done ...
            if (kt > 0) {                                 // ... so the previous stage is free
                if (signals) pipe.consumer_release(previous, peer);
                previous.advance();
            }
        }
        wgmma_wait<0>();
        if (signals && tiles_k > 0) pipe.consumer_release(previous, peer);   // the tile's last stage
    }
};

}  // namespace gemm_sm90
