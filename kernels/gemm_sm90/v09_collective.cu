// v09_collective.cu: chapter 13, hgemm v9 (sm_90a). Chapter 12's v8, assembled from the collectives in this
// folder: the pipeline (pipeline.cuh), the mainloop (mainloop.cuh), the epilogue (epilogue.cuh) and the tile
// scheduler (scheduler.cuh). The kernel itself only lays out shared memory, splits the warpgroups into
// producer and consumers, and walks the scheduler's tiles: the shape of CUTLASS 3.x's
// include/cutlass/gemm/kernel/sm90_gemm_tma_warpspecialized_cooperative.hpp. It computes what v8 computes,
// in the same order.
#include "mainloop.cuh"
#include "epilogue.cuh"
#include "scheduler.cuh"

// [[snippet: hgemm_v9]]
template <int BN, int STAGES, int GROUP_M>
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(384, 1)
hgemm_v9_collective(int M, int N, int K, const __grid_constant__ TmaDescriptor map_a,
                    const __grid_constant__ TmaDescriptor map_b, const __grid_constant__ TmaDescriptor map_c) {
    constexpr int BM = 128, CONSUMERS = 2, CTAS = 2;
    using Mainloop = gemm_sm90::MainloopTmaWgmma<BM, BN, STAGES, CONSUMERS, CTAS>;
    using Epilogue = gemm_sm90::EpilogueTmaStore<BM, BN>;
    using Scheduler = gemm_sm90::PersistentScheduler<BM, BN, GROUP_M, CTAS>;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    unsigned char* smem = atom_aligned(smem_raw);     // [stages][staging tiles][pipeline barriers]
    const Mainloop mainloop{smem};
    const Epilogue epilogue{reinterpret_cast<bf16*>(smem + STAGES * Mainloop::STAGE_BYTES)};
    auto& pipe = *reinterpret_cast<typename Mainloop::Pipeline*>(
        smem + STAGES * Mainloop::STAGE_BYTES + CONSUMERS * Epilogue::STAGING_BYTES);

    const unsigned rank = cluster_ctarank(), peer = rank ^ 1;
    const int tiles_k = (K + HOPPER_BK - 1) / HOPPER_BK;
    if (threadIdx.x == 0) pipe.init();
    cluster_sync();                                   // both CTAs' barriers exist before anyone signals them

    typename Mainloop::State st;
    const int wg = threadIdx.x / 128;
    if (wg == 0) {                                    // the producer warpgroup: one thread issues the TMA loads
        setmaxnreg_dec<PRODUCER_REGS>();
        if (threadIdx.x == 0)
            for (Scheduler s(M, N, rank); s.valid(); s.advance())
                mainloop.load(pipe, st, &map_a, &map_b, s.tile(), tiles_k, rank);
    } else {                                          // two consumer warpgroups: 64 rows of the tile each
        setmaxnreg_inc<CONSUMER_REGS>();
        const bool signals = threadIdx.x % 128 == 0;
        float acc[BN / 2];
        for (Scheduler s(M, N, rank); s.valid(); s.advance()) {
            mainloop.mma(pipe, st, acc, 64 * (wg - 1), tiles_k, signals, peer);
            epilogue.store(acc, &map_c, s.tile(), wg - 1, signals);
        }
        epilogue.drain(signals);
    }
    __syncwarp();
    cluster_sync();                                   // the peer may still arrive on our barriers until here
}
// [[/snippet]]
