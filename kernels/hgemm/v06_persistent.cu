// v06_persistent.cu: chapter 12, hgemm v6 (sm_90a). v5 on a persistent grid: one block per SM (the plan
// lowers the grid to what fits at once), each walking output tiles blockIdx.x, blockIdx.x + gridDim.x, ...
// in the grouped order. Producer and consumers walk the same tiles and count stages across them, so the
// producer fills the next tile's stages while the consumers are still storing the last one, and no block
// pays a launch, a barrier setup or a pipeline ramp per tile.
#include "hopper_common.cuh"

// [[snippet: hgemm_v6]]
template <int BN, int STAGES, int GROUP_M>
__global__ void __launch_bounds__(384, 1)
hgemm_v6_persistent(int M, int N, int K, const __grid_constant__ TmaDescriptor map_a,
                    const __grid_constant__ TmaDescriptor map_b, bf16* __restrict__ C) {
    constexpr int BM = 128, CONSUMER_WARPGROUPS = 2;
    constexpr int A_BYTES = BM * HOPPER_BK * 2, B_BYTES = HOPPER_BK * BN * 2, STAGE = A_BYTES + B_BYTES;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    unsigned char* smem = atom_aligned(smem_raw);     // [STAGES][A: 128 x 64 | B: BN/64 x (64 x 64)], swizzled
    __shared__ __align__(8) unsigned long long full[STAGES], empty[STAGES];
    auto a_stage = [&](int s) { return reinterpret_cast<bf16*>(smem + s * STAGE); };
    auto b_stage = [&](int s) { return reinterpret_cast<bf16*>(smem + s * STAGE + A_BYTES); };

    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN, tiles = tiles_m * tiles_n;
    const int tiles_k = (K + HOPPER_BK - 1) / HOPPER_BK;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbarrier_init(&full[s], 1);
            mbarrier_init(&empty[s], CONSUMER_WARPGROUPS);
        }
        fence_barrier_init();
    }
    __syncthreads();

    const int wg = threadIdx.x / 128;
    if (wg == 0) {                                    // the producer
        setmaxnreg_dec<PRODUCER_REGS>();
        if (threadIdx.x == 0) {
            int it = 0;                               // stages filled so far, over every tile of this block
            for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
                int tile_m, tile_n;
                grouped_tile(tile, tiles_m, tiles_n, GROUP_M, tile_m, tile_n);
                for (int kt = 0; kt < tiles_k; ++kt, ++it) {
                    const int s = it % STAGES;
                    mbarrier_wait(&empty[s], ((it / STAGES) & 1) ^ 1);
                    mbarrier_arrive_expect_tx(&full[s], STAGE);
                    tma_load_2d(a_stage(s), &map_a, kt * HOPPER_BK, tile_m * BM, &full[s]);
#pragma unroll
                    for (int b = 0; b < BN / 64; ++b)
                        tma_load_2d(b_stage(s) + b * 64 * 64, &map_b, tile_n * BN + 64 * b, kt * HOPPER_BK, &full[s]);
                }
            }
        }
        return;
    }
    setmaxnreg_inc<CONSUMER_REGS>();                  // the consumers
    const int rows = 64 * (wg - 1);
    const bool signals = threadIdx.x % 128 == 0;      // the warpgroup's thread that releases stages
    int it = 0;                                       // stages consumed so far, in the producer's order
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        int tile_m, tile_n;
        grouped_tile(tile, tiles_m, tiles_n, GROUP_M, tile_m, tile_n);
        float acc[BN / 2] = {};
        for (int kt = 0; kt < tiles_k; ++kt, ++it) {
            const int s = it % STAGES;
            mbarrier_wait(&full[s], (it / STAGES) & 1);
            wgmma_stage<BN>(acc, a_stage(s), b_stage(s), rows);
            wgmma_wait<1>();
            if (kt > 0 && signals) mbarrier_arrive(&empty[(it - 1) % STAGES]);
        }
        wgmma_wait<0>();
        if (signals) mbarrier_arrive(&empty[(it - 1) % STAGES]);   // the tile's last stage, its group done
        store_wgmma_tile<BN>(acc, C, M, N, tile_m * BM + rows, tile_n * BN);
    }
}
// [[/snippet]]
