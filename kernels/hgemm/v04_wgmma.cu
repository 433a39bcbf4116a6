// v04_wgmma.cu: chapter 12, hgemm v4, the first Hopper-way version (sm_90a). One warpgroup (128 threads)
// computes a BM x BN tile with wgmma, both operands read by the tensor cores straight from shared memory;
// the tiles arrive by TMA (one thread issues a stage's copies, an mbarrier counts their bytes), 128-byte
// swizzled as wgmma's descriptors say (hopper_common.cuh). STAGES stages are in flight. The loop is still in
// lockstep: every thread waits for its wgmmas to finish and for the whole block before a stage is refilled.
// TMA fills what lies outside A and B with zeros, so the tails need no code; the epilogue tests every store.
#include "hopper_common.cuh"

// [[snippet: hgemm_v4]]
template <int BM, int BN, int STAGES, int GROUP_M>
__global__ void __launch_bounds__(128)
hgemm_v4_wgmma(int M, int N, int K, const __grid_constant__ TmaDescriptor map_a,
               const __grid_constant__ TmaDescriptor map_b, bf16* __restrict__ C) {
    static_assert(BM % 64 == 0 && BN % 64 == 0, "m64 halves and 64-wide boxes of B");
    constexpr int A_BYTES = BM * HOPPER_BK * 2, B_BYTES = HOPPER_BK * BN * 2, STAGE = A_BYTES + B_BYTES;
    static_assert(A_BYTES % SW128_ATOM == 0 && B_BYTES % SW128_ATOM == 0, "stages stay 1024-byte aligned");
    extern __shared__ __align__(128) unsigned char smem_raw[];
    unsigned char* smem = atom_aligned(smem_raw);     // [STAGES][A: BM x 64 | B: BN/64 x (64 x 64)], swizzled
    __shared__ __align__(8) unsigned long long full[STAGES];
    auto a_stage = [&](int s) { return reinterpret_cast<bf16*>(smem + s * STAGE); };
    auto b_stage = [&](int s) { return reinterpret_cast<bf16*>(smem + s * STAGE + A_BYTES); };

    int tile_m, tile_n;
    grouped_tile(blockIdx.x, (M + BM - 1) / BM, (N + BN - 1) / BN, GROUP_M, tile_m, tile_n);
    const int m0 = tile_m * BM, n0 = tile_n * BN, tiles_k = (K + HOPPER_BK - 1) / HOPPER_BK;

    auto issue = [&](int s, int kt) {                 // thread 0: stage s <- k-tile kt of A and B
        mbarrier_arrive_expect_tx(&full[s], STAGE);    // whole boxes, zero fill included
        tma_load_2d(a_stage(s), &map_a, kt * HOPPER_BK, m0, &full[s]);
#pragma unroll
        for (int b = 0; b < BN / 64; ++b)
            tma_load_2d(b_stage(s) + b * 64 * 64, &map_b, n0 + 64 * b, kt * HOPPER_BK, &full[s]);
    };
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) mbarrier_init(&full[s], 1);
        fence_barrier_init();
    }
    __syncthreads();
    if (threadIdx.x == 0)
        for (int s = 0; s < STAGES && s < tiles_k; ++s) issue(s, s);

    float acc[BM / 64][BN / 2] = {};                  // [m64 half][wgmma accumulators]
    for (int kt = 0; kt < tiles_k; ++kt) {
        const int s = kt % STAGES;
        mbarrier_wait(&full[s], (kt / STAGES) & 1);   // the stage's bytes have landed
#pragma unroll
        for (int h = 0; h < BM / 64; ++h) wgmma_stage<BN>(acc[h], a_stage(s), b_stage(s), 64 * h);
        wgmma_wait<0>();                              // this thread's wgmmas are done with stage s ...
        __syncthreads();                              // ... and everyone's: TMA may overwrite it
        if (threadIdx.x == 0 && kt + STAGES < tiles_k) issue(s, kt + STAGES);
    }
#pragma unroll
    for (int h = 0; h < BM / 64; ++h) store_wgmma_tile<BN>(acc[h], C, M, N, m0 + 64 * h, n0);
}
// [[/snippet]]
