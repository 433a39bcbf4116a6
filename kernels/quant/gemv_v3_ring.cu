// gemv_v3_ring.cu: W4A16 GEMV v3 (parent v1): each thread streams its own rows through a private
// cp.async ring, no barrier.
#include "gemv_common.cuh"

// ---------------------------------------------------------------------------------------------------
// W4A16 GEMV v3: v1's thread layout and arithmetic (8 column lanes x 32 K-slices, 32 columns and all K
// per CTA), but every thread streams its OWN weight rows through a private cp.async ring in smem.
// Why: v1's SASS shows ptxas issuing only ~4 of a thread's 8 weight loads before the first use (it
// sinks the rest next to their uses), so ~64 B per thread = ~32 KB per SM are in flight; v2's shared
// stages need a __syncthreads per group, so every warp waits for the slowest of the CTA's ~600 copies.
// Here the copies have no register destination that ptxas could sink, and a thread only ever reads
// the slots it filled itself, so cp.async.wait_group alone orders it: no barrier in the main loop.
// Stage = ROWS qweight rows (ROWS * 16 B per thread); STAGES - 1 stages stay in flight per thread,
// (STAGES - 1) * ROWS * 16 B * 512 threads per SM (ROWS = 8, STAGES = 3: 128 KB per SM).
// smem: ring [STAGES][ROWS][256 threads] uint4 (a warp reads 512 contiguous bytes: conflict-free),
// side [STAGES][256] uint4 = (4 scales, zero word) of the group, copied with the group's first stage.
// Requires K % 128 == 0 and N % 8 == 0 (as v1).
// ---------------------------------------------------------------------------------------------------
template <int ROWS>
__device__ __forceinline__ void gemv_v3_issue(uint4* slot, uint4* side, int r0, bool first_of_group, int g, int n,
                                              int N, const uint4* __restrict__ qweight,
                                              const unsigned* __restrict__ qzeros,
                                              const __nv_bfloat16* __restrict__ scales) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
        cp_async16(slot + r * GEMV_THREADS, qweight + (size_t)(r0 + r) * (N / 4) + (n >> 2));
    if (first_of_group) {
        cp_async8(side, scales + (size_t)g * N + n);                               // s[g, n .. n+3]
        cp_async4(reinterpret_cast<unsigned*>(side) + 2, qzeros + (size_t)g * (N / 8) + (n >> 3));   // z word
    }
}

// [[snippet: w4a16_gemv_v3]]
template <int ROWS, int STAGES>
__global__ void __launch_bounds__(GEMV_THREADS, 2) w4a16_gemv_v3_ring(
    const uint4* __restrict__ qweight,          // [K/8, N/4] uint4 = [K/8, N] int32
    const unsigned* __restrict__ qzeros,        // [K/128, N/8]
    const __nv_bfloat16* __restrict__ scales,   // [K/128, N]
    const __nv_bfloat16* __restrict__ x,        // [K]
    __nv_bfloat16* __restrict__ out,            // [N]
    int K, int N) {
    constexpr int PER_GROUP = ROWS_PER_GROUP / ROWS;             // stages per group of 128 k
    static_assert(ROWS_PER_GROUP % ROWS == 0, "ROWS must divide 16");
    extern __shared__ __align__(16) unsigned char smem[];
    uint4* ring = reinterpret_cast<uint4*>(smem) + threadIdx.x;                      // [STAGES][ROWS][256]
    uint4* side = reinterpret_cast<uint4*>(smem) + STAGES * ROWS * GEMV_THREADS + threadIdx.x;   // [STAGES][256]
    const int lane_c = threadIdx.x & 7, ks = threadIdx.x >> 3;
    const int n = blockIdx.x * GEMV_COLS + lane_c * 4;           // this thread's columns n .. n+3
    const int groups = K / GROUP;
    const int my_groups = n < N ? (groups - ks + GEMV_KSLICES - 1) / GEMV_KSLICES : 0;   // groups ks, ks+32, ...
    const int n_stages = my_groups * PER_GROUP;
    auto issue = [&](int st) {                                   // stage st -> slot st % STAGES
        if (st < n_stages) {
            const int g = ks + (st / PER_GROUP) * GEMV_KSLICES, h = st % PER_GROUP;
            gemv_v3_issue<ROWS>(ring + (st % STAGES) * ROWS * GEMV_THREADS, side + (st % STAGES) * GEMV_THREADS,
                                g * ROWS_PER_GROUP + h * ROWS, h == 0, g, n, N, qweight, qzeros, scales);
        }
        cp_async_commit();                                       // empty groups keep the count uniform
    };
#pragma unroll
    for (int st = 0; st < STAGES - 1; ++st) issue(st);

    float acc[4] = {0.f, 0.f, 0.f, 0.f}, gacc[4] = {0.f, 0.f, 0.f, 0.f};
    __nv_bfloat162 zb[4];
    uint2 sv = make_uint2(0u, 0u);
    for (int st = 0; st < n_stages; ++st) {
        issue(st + STAGES - 1);                                  // refill the slot consumed last iteration
        cp_async_wait<STAGES - 1>();                             // this thread's stage st has landed
        const int g = ks + (st / PER_GROUP) * GEMV_KSLICES, h = st % PER_GROUP;
        const uint4* slot = ring + (st % STAGES) * ROWS * GEMV_THREADS;
        if (h == 0) {
            const uint4 sd = side[(st % STAGES) * GEMV_THREADS];
            sv = make_uint2(sd.x, sd.y);
            const unsigned zw = sd.z >> ((n & 7) * 4);
#pragma unroll
            for (int c = 0; c < 4; ++c) {
                zb[c] = u32_as_bf162(bf16x2_biased_zero((zw >> (4 * c)) & 0xfu));
                gacc[c] = 0.f;
            }
        }
        const int r0 = g * ROWS_PER_GROUP + h * ROWS;
#pragma unroll
        for (int r = 0; r < ROWS; ++r)
            gemv_dot_row(slot[r * GEMV_THREADS], __ldg(reinterpret_cast<const uint4*>(x) + r0 + r), zb, gacc);
        if (h == PER_GROUP - 1) {
            gemv_apply_scales(gacc, sv, acc);
        }
    }
    cp_async_wait<0>();                                          // only empty groups remain; leave none behind
    gemv_reduce_store(acc, out, N);
}
// [[/snippet]]
