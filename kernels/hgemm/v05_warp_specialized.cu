// v05_warp_specialized.cu: chapter 12, hgemm v5 (sm_90a). v4 split into roles: warpgroup 0 is the producer
// (one thread issues the TMA copies; the warpgroup hands most of its registers back with setmaxnreg), and
// warpgroups 1 and 2 are consumers, each computing 64 rows of a 128 x BN tile with m64nBNk16 wgmmas (and
// taking the producer's registers). Two mbarriers per stage replace the block-wide barrier: `full` (the
// stage's bytes have landed) and `empty` (both consumer warpgroups are done reading it: one thread of each
// arrives after its wgmma wait, since a wgmma group completes for its whole warpgroup at once). A consumer
// keeps one wgmma group in flight: it releases stage k - 1 only after waiting for all but the newest group.
#include "hopper_common.cuh"

// [[snippet: hgemm_v5]]
template <int BN, int STAGES, int GROUP_M>
__global__ void __launch_bounds__(384, 1)
hgemm_v5_warp_specialized(int M, int N, int K, const __grid_constant__ TmaDescriptor map_a,
                          const __grid_constant__ TmaDescriptor map_b, bf16* __restrict__ C) {
    constexpr int BM = 128, CONSUMER_WARPGROUPS = 2;
    constexpr int A_BYTES = BM * HOPPER_BK * 2, B_BYTES = HOPPER_BK * BN * 2, STAGE = A_BYTES + B_BYTES;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    unsigned char* smem = atom_aligned(smem_raw);     // [STAGES][A: 128 x 64 | B: BN/64 x (64 x 64)], swizzled
    __shared__ __align__(8) unsigned long long full[STAGES], empty[STAGES];
    auto a_stage = [&](int s) { return reinterpret_cast<bf16*>(smem + s * STAGE); };
    auto b_stage = [&](int s) { return reinterpret_cast<bf16*>(smem + s * STAGE + A_BYTES); };

    int tile_m, tile_n;
    grouped_tile(blockIdx.x, (M + BM - 1) / BM, (N + BN - 1) / BN, GROUP_M, tile_m, tile_n);
    const int m0 = tile_m * BM, n0 = tile_n * BN, tiles_k = (K + HOPPER_BK - 1) / HOPPER_BK;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbarrier_init(&full[s], 1);               // the producer's arrive_expect_tx
            mbarrier_init(&empty[s], CONSUMER_WARPGROUPS);   // one thread per consumer warpgroup
        }
        fence_barrier_init();
    }
    __syncthreads();

    const int wg = threadIdx.x / 128;
    if (wg == 0) {                                    // the producer
        setmaxnreg_dec<PRODUCER_REGS>();
        if (threadIdx.x == 0) {
            for (int kt = 0; kt < tiles_k; ++kt) {
                const int s = kt % STAGES;
                mbarrier_wait(&empty[s], ((kt / STAGES) & 1) ^ 1);   // first pass: a fresh barrier lets us by
                mbarrier_arrive_expect_tx(&full[s], STAGE);
                tma_load_2d(a_stage(s), &map_a, kt * HOPPER_BK, m0, &full[s]);
#pragma unroll
                for (int b = 0; b < BN / 64; ++b)
                    tma_load_2d(b_stage(s) + b * 64 * 64, &map_b, n0 + 64 * b, kt * HOPPER_BK, &full[s]);
            }
        }
        return;
    }
    setmaxnreg_inc<CONSUMER_REGS>();                  // the consumers
    const int rows = 64 * (wg - 1);                   // this warpgroup's 64 rows of the tile
    const bool signals = threadIdx.x % 128 == 0;      // the warpgroup's thread that releases stages
    float acc[BN / 2] = {};
    for (int kt = 0; kt < tiles_k; ++kt) {
        const int s = kt % STAGES;
        mbarrier_wait(&full[s], (kt / STAGES) & 1);
        wgmma_stage<BN>(acc, a_stage(s), b_stage(s), rows);
        wgmma_wait<1>();                              // all but this stage's group are done ...
        if (kt > 0 && signals) mbarrier_arrive(&empty[(kt - 1) % STAGES]);   // ... so the previous stage is free
    }
    wgmma_wait<0>();
    store_wgmma_tile<BN>(acc, C, M, N, m0 + rows, n0);
}
// [[/snippet]]
