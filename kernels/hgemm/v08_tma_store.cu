// v08_tma_store.cu: chapter 12, hgemm v8 (sm_90a). v7 with the epilogue through TMA: each consumer warpgroup
// writes its 64 x BN results as bf16 into its own 64 x 64 staging tile in shared memory (128-byte swizzled, so
// a warp's 4-byte stores fall into 8 different bank groups), and one of its threads stores the tile to C with
// one TMA instruction, which clips at C's edges. BN / 64 chunks per tile; a chunk is written into the buffer
// only after the previous chunk's store has finished reading it. The consumers' tested global stores leave the
// loop, and the copy engine writes C while the consumers start the next tile. C must be readable by TMA too
// (N a multiple of 8, a 128-byte aligned base); elsewhere the plan runs v7.
#include "hopper_common.cuh"
#include "cluster_sm90.cuh"

// [[snippet: hgemm_v8]]
template <int BN, int STAGES, int GROUP_M>
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(384, 1)
hgemm_v8_tma_store(int M, int N, int K, const __grid_constant__ TmaDescriptor map_a,
                   const __grid_constant__ TmaDescriptor map_b, const __grid_constant__ TmaDescriptor map_c) {
    constexpr int BM = 128, CONSUMER_WARPGROUPS = 2, B_BOXES = BN / 64;
    constexpr int A_BYTES = BM * HOPPER_BK * 2, B_BYTES = HOPPER_BK * BN * 2, STAGE = A_BYTES + B_BYTES;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    unsigned char* smem = atom_aligned(smem_raw);     // [STAGES][A | B], [2][C: 64 x 64], full, empty
    bf16* c_staging = reinterpret_cast<bf16*>(smem + STAGES * STAGE);   // [consumer warpgroup][64 x 64], swizzled
    unsigned long long* full = reinterpret_cast<unsigned long long*>(smem + STAGES * STAGE + 2 * C_CHUNK_BYTES);
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
            store_wgmma_tile_tma<BN>(acc, c_staging + (wg - 1) * 64 * 64, &map_c, tile_m * BM + rows, tile_n * BN,
                                     signals);
        }
        if (signals) tma_store_wait_all();            // C is written before the block retires
    }
    __syncwarp();
    cluster_sync();                                   // the peer may still arrive on our barriers until here
}
// [[/snippet]]
