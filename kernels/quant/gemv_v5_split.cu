// gemv_v5_split.cu: W4A16 GEMV v5 (parent v1): v1's arithmetic on a split-K grid of whole waves,
// <= 64 registers, each row batch's loads issued before its math.
#include "splitk.cuh"

// ---------------------------------------------------------------------------------------------------
// W4A16 GEMV v5: fill the chip. v1 runs 256 CTAs (N / 32) with 95 registers, 2 CTAs per SM: ~1 eligible
// warp per scheduler, and each thread works through only 2 groups, so the prologue, the block reduction
// and the tail of the single partial wave weigh heavily. v5 keeps v1's arithmetic (gemv_dot_row) and
// changes the shape of the work:
//  * CTA tile = BN columns x one K split (grid.y = splits), so the grid is tiles x splits CTAs and the
//    launcher picks splits for whole waves of 4 CTAs per SM; split-K partials meet deterministically
//    (splitk_last_arrival, as v2 and the Marlin GEMM);
//  * <= 64 registers (launch bounds 256 x 4): 32 warps per SM, 8 per scheduler;
//  * a thread takes blocks of ROWS qweight rows (one zero word and 4 scales per block) and issues all
//    ROWS 16-byte weight loads (ld.global.nc.L1::no_allocate, volatile so they stay ahead of the math)
//    before it converts any of them.
// Thread (rt, quad) = (tid / (BN/4), tid % (BN/4)): columns 4 quad .. 4 quad + 3, row blocks rt,
// rt + RT, ... of the split (RT = 256 / (BN/4) threads share a quad). Requires K % 128 == 0, N % 8 == 0.
// ---------------------------------------------------------------------------------------------------
// 16 bytes, read-only path, not allocated in L1 (each weight is read exactly once).
__device__ __forceinline__ uint4 ld_stream16(const uint4* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

// [[snippet: w4a16_gemv_v5]]
template <int BN, int ROWS>
__global__ void __launch_bounds__(GEMV_THREADS, 4) w4a16_gemv_v5_split(
    const uint4* __restrict__ qweight,          // [K/8, N/4] uint4 = [K/8, N] int32
    const unsigned* __restrict__ qzeros,        // [K/128, N/8]
    const __nv_bfloat16* __restrict__ scales,   // [K/128, N]
    const __nv_bfloat16* __restrict__ x,        // [K]
    __nv_bfloat16* __restrict__ out,            // [N]
    float* __restrict__ ws,                     // [splits, N] fp32 partial sums (splits > 1)
    unsigned* __restrict__ counters,            // [gridDim.x] zero between launches
    int K, int N) {
    constexpr int QUADS = BN / 4;                                // column quads per CTA
    constexpr int RT = GEMV_THREADS / QUADS;                     // threads per quad (row blocks in parallel)
    constexpr int BLOCKS_PER_GROUP = ROWS_PER_GROUP / ROWS;
    static_assert(ROWS_PER_GROUP % ROWS == 0 && GEMV_THREADS % QUADS == 0, "ROWS | 16, BN | 1024");
    __shared__ float red[RT][BN + 1];                            // [row threads, columns] fp32 partials
    const int quad = threadIdx.x % QUADS, rt = threadIdx.x / QUADS;
    const int n = blockIdx.x * BN + 4 * quad;                    // this thread's columns n .. n+3
    const int split = blockIdx.y, splits = gridDim.y;
    const int blocks = (K / 8) / ROWS;                           // row blocks along K
    const int b_begin = (int)((long long)split * blocks / splits);
    const int b_end = (int)((long long)(split + 1) * blocks / splits);
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    if (n < N) {                                                 // N % 8 == 0: n < N implies n + 3 < N
        const uint4* wp = qweight + (n >> 2);
        for (int b = b_begin + rt; b < b_end; b += RT) {
            const int r0 = b * ROWS, grp = b / BLOCKS_PER_GROUP;
            uint4 wv[ROWS];                                      // [ROWS rows, 4 columns] int32, all in flight
#pragma unroll
            for (int r = 0; r < ROWS; ++r) wv[r] = ld_stream16(wp + (size_t)(r0 + r) * (N / 4));
            const unsigned zw = __ldg(qzeros + (size_t)grp * (N / 8) + (n >> 3)) >> ((n & 7) * 4);
            const uint2 sv = __ldg(reinterpret_cast<const uint2*>(scales + (size_t)grp * N + n));
            __nv_bfloat162 zb[4];
            float gacc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
            for (int c = 0; c < 4; ++c) zb[c] = u32_as_bf162(bf16x2_biased_zero((zw >> (4 * c)) & 0xfu));
#pragma unroll
            for (int r = 0; r < ROWS; ++r)
                gemv_dot_row(wv[r], __ldg(reinterpret_cast<const uint4*>(x) + r0 + r), zb, gacc);
            gemv_apply_scales(gacc, sv, acc);
        }
    }
#pragma unroll
    for (int c = 0; c < 4; ++c) red[rt][4 * quad + c] = acc[c];
    __syncthreads();
    const int col = blockIdx.x * BN + threadIdx.x;
    float sum = 0.f;
    if (threadIdx.x < BN) {
#pragma unroll 8
        for (int r = 0; r < RT; ++r) sum += red[r][threadIdx.x];  // fixed order: deterministic
    }
    gemv_splitk_store(sum, threadIdx.x < BN && col < N, col, out, ws, counters + blockIdx.x, split, splits, N);
}
// [[/snippet]]
