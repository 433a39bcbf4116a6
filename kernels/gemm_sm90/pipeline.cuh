// pipeline.cuh: the stage ring of chapter 12's Hopper GEMMs as one object, the way CUTLASS 3.x names it
// (include/cutlass/pipeline/sm90_pipeline.hpp, PipelineTmaAsync): a producer acquires an empty stage, announces
// its bytes and lets TMA fill it; a consumer waits for a full stage and releases it when its wgmmas are done.
// The ring position (stage index and the parity of its phase) runs on across output tiles, so a persistent
// block never drains its pipeline between tiles. Chapters 13 (the GEMM) and 17-18 (attention) share it.
#pragma once
#include "tma_sm90.cuh"
#include "cluster_sm90.cuh"

namespace gemm_sm90 {

// Where the ring is: slot `index` in its `phase`-th use (mod 2). Producer and consumers each keep their own copy
// and advance it once per stage, in the same order.
template <int STAGES>
struct PipeState {
    int index = 0;
    unsigned phase = 0;
    __device__ __forceinline__ void advance() {
        if (++index == STAGES) {
            index = 0;
            phase ^= 1;
        }
    }
};

// STAGES pairs of mbarriers in shared memory: full[s] completes when the producer has announced the stage's
// bytes and they have landed; empty[s] when every consumer warpgroup of every CTA reading the stage (CTAS of
// them share it through multicast) has released it.
template <int STAGES, int CONSUMERS, int CTAS>
struct TmaPipeline {
    unsigned long long full[STAGES], empty[STAGES];

    // One thread, before any other thread of the cluster touches a barrier (then a cluster or block barrier).
    __device__ __forceinline__ void init() {
        for (int s = 0; s < STAGES; ++s) {
            mbarrier_init(&full[s], 1);                    // the producer's arrive_expect_tx
            mbarrier_init(&empty[s], CONSUMERS * CTAS);    // one signalling thread per consumer warpgroup
        }
        fence_barrier_init();
    }
    // Producer: wait until stage `st` is free (a fresh barrier lets the first pass through), then announce the
    // bytes TMA will land on full[st] (from this CTA's copies and, with multicast, its peers').
    __device__ __forceinline__ unsigned long long* producer_acquire(PipeState<STAGES> st, unsigned bytes) {
        mbarrier_wait(&empty[st.index], st.phase ^ 1);
        mbarrier_arrive_expect_tx(&full[st.index], bytes);
        return &full[st.index];
    }
    // Consumer: wait until stage `st` has landed.
    __device__ __forceinline__ void consumer_wait(PipeState<STAGES> st) { mbarrier_wait(&full[st.index], st.phase); }
    // Consumer (one thread per warpgroup, after its wgmmas on the stage completed): free stage `st` in this CTA
    // and, with multicast, in the peer whose producer also writes into it.
    __device__ __forceinline__ void consumer_release(PipeState<STAGES> st, unsigned peer) {
        mbarrier_arrive(&empty[st.index]);
        if constexpr (CTAS == 2) mbarrier_arrive_cluster(&empty[st.index], peer);
    }
};

}  // namespace gemm_sm90
