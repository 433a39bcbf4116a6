// v07_multicast.cu: chapter 12, hgemm v7 (sm_90a). v6 in clusters of two CTAs that take vertically adjacent
// tiles (rows 2p and 2p + 1 of the tile grid, the same columns): they need the same B tile at every stage, so
// each CTA's producer loads half of B's boxes with a multicast TMA that writes them into both CTAs' shared
// memory. B crosses from L2 once for two tiles instead of twice. The price: a stage may be overwritten by the
// peer's producer too, so each CTA's `empty` barrier counts the consumers of both CTAs (each consumer thread
// arrives on its own CTA's barrier and on the peer's), and a CTA may not exit while its peer can still
// arrive on its barriers (a cluster barrier at the end). The barriers live in dynamic shared memory.
#include "hopper_common.cuh"
#include "cluster_sm90.cuh"

// [[snippet: hgemm_v7]]
template <int BN, int STAGES, int GROUP_M>
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(384, 1)
hgemm_v7_multicast(int M, int N, int K, const __grid_constant__ TmaDescriptor map_a,
                   const __grid_constant__ TmaDescriptor map_b, bf16* __restrict__ C) {
    constexpr int BM = 128, CONSUMER_WARPGROUPS = 2, B_BOXES = BN / 64;
    constexpr int A_BYTES = BM * HOPPER_BK * 2, B_BYTES = HOPPER_BK * BN * 2, STAGE = A_BYTES + B_BYTES;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    unsigned char* smem = atom_aligned(smem_raw);     // [STAGES][A | B], then full[STAGES], empty[STAGES]
    unsigned long long* full = reinterpret_cast<unsigned long long*>(smem + STAGES * STAGE);
    unsigned long long* empty = full + STAGES;
    auto a_stage = [&](int s) { return reinterpret_cast<bf16*>(smem + s * STAGE); };
    auto b_stage = [&](int s) { return reinterpret_cast<bf16*>(smem + s * STAGE + A_BYTES); };

    const unsigned rank = cluster_ctarank(), peer = rank ^ 1;
    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN, tiles_k = (K + HOPPER_BK - 1) / HOPPER_BK;
    const int pairs = (tiles_m + 1) / 2 * tiles_n;   // tile pairs; a pair past M's last tile loads zeros
    const int cluster = blockIdx.x / 2, clusters = gridDim.x / 2;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbarrier_init(&full[s], 1);
            mbarrier_init(&empty[s], 2 * CONSUMER_WARPGROUPS);   // the consumer warpgroups of both CTAs
        }
        fence_barrier_init();
    }
    cluster_sync();                                   // both CTAs' barriers exist before anyone signals them

    const int wg = threadIdx.x / 128;
    if (wg == 0) {                                    // the producer
        setmaxnreg_dec<PRODUCER_REGS>();
        if (threadIdx.x == 0) {
            int it = 0;
            for (int pair = cluster; pair < pairs; pair += clusters) {
                int pair_m, tile_n;
                grouped_tile(pair, (tiles_m + 1) / 2, tiles_n, GROUP_M, pair_m, tile_n);
                const int tile_m = 2 * pair_m + rank;
                for (int kt = 0; kt < tiles_k; ++kt, ++it) {
                    const int s = it % STAGES;
                    mbarrier_wait(&empty[s], ((it / STAGES) & 1) ^ 1);   // both CTAs are done with stage s
                    mbarrier_arrive_expect_tx(&full[s], STAGE);            // A, and all of B (half from the peer)
                    tma_load_2d(a_stage(s), &map_a, kt * HOPPER_BK, tile_m * BM, &full[s]);
#pragma unroll
                    for (int b = rank * B_BOXES / 2; b < (rank + 1) * B_BOXES / 2; ++b)
                        tma_load_2d_multicast(b_stage(s) + b * 64 * 64, &map_b, tile_n * BN + 64 * b, kt * HOPPER_BK,
                                              &full[s], 0b11);
                }
            }
        }
    } else {                                          // the consumers
        setmaxnreg_inc<CONSUMER_REGS>();
        const int rows = 64 * (wg - 1);
        const bool signals = threadIdx.x % 128 == 0;  // the warpgroup's thread that releases stages
        int it = 0;
        for (int pair = cluster; pair < pairs; pair += clusters) {
            int pair_m, tile_n;
            grouped_tile(pair, (tiles_m + 1) / 2, tiles_n, GROUP_M, pair_m, tile_n);
            const int tile_m = 2 * pair_m + rank;
            float acc[BN / 2] = {};
            for (int kt = 0; kt < tiles_k; ++kt, ++it) {
                const int s = it % STAGES;
                mbarrier_wait(&full[s], (it / STAGES) & 1);
                wgmma_stage<BN>(acc, a_stage(s), b_stage(s), rows);
                wgmma_wait<1>();
                if (kt > 0 && signals) {
                    mbarrier_arrive(&empty[(it - 1) % STAGES]);
                    mbarrier_arrive_cluster(&empty[(it - 1) % STAGES], peer);
                }
            }
            wgmma_wait<0>();
            if (signals) {
                mbarrier_arrive(&empty[(it - 1) % STAGES]);
                mbarrier_arrive_cluster(&empty[(it - 1) % STAGES], peer);
            }
            store_wgmma_tile<BN>(acc, C, M, N, tile_m * BM + rows, tile_n * BN);
        }
    }
    __syncwarp();
    cluster_sync();                                   // the peer may still arrive on our barriers until here
}
// [[/snippet]]
