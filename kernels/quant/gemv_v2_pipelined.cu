// gemv_v2_pipelined.cu: W4A16 GEMV v2 (parent v1): v1's arithmetic; a cp.async pipeline through smem;
// split-K over CTAs.
#include "splitk.cuh"

// ---------------------------------------------------------------------------------------------------
// W4A16 GEMV v2: the same GPTQ tensors and the same arithmetic as v1 (gemv_dot_row), but the
// weights are streamed through a STAGES-deep cp.async pipeline in shared memory, so the bytes in
// flight no longer depend on registers, and K is split across CTAs so that every SM holds 2+ CTAs.
// CTA tile: BN columns x the groups [g_begin, g_end) of its split. Stage = one group:
//   W [16 qweight rows, BN/4 uint4] | x [128] bf16 | scales [BN] bf16 | qzeros [BN/8] int32
// Thread (rb, quad) = (tid / (BN/4), tid % (BN/4)) owns columns 4 quad .. 4 quad + 3 and the
// qweight rows rb, rb + 256/(BN/4), ... of every stage; its partial sums meet the other rb's in smem.
// Requires K % 128 == 0 and N % 8 == 0 (as v1).
// ---------------------------------------------------------------------------------------------------
template <int BN>
struct GemvStage {
    static constexpr int QUADS = BN / 4;                         // uint4 (4 columns) per qweight row
    static constexpr int W_BYTES = ROWS_PER_GROUP * BN * 4;      // [16, BN] int32
    static constexpr int X_BYTES = GROUP * 2;                    // [128] bf16
    static constexpr int S_BYTES = BN * 2;                       // [BN] bf16
    static constexpr int Z_BYTES = BN / 2;                       // [BN/8] int32
    static constexpr int BYTES = W_BYTES + X_BYTES + S_BYTES + Z_BYTES;
};

// Issue the cp.async of group g into one stage; columns past N are zero-filled.
template <int BN>
__device__ __forceinline__ void gemv_load_stage(unsigned char* st, int g, int n0, int N,
                                                const uint4* __restrict__ qweight, const unsigned* __restrict__ qzeros,
                                                const __nv_bfloat16* __restrict__ scales,
                                                const __nv_bfloat16* __restrict__ x) {
    using S = GemvStage<BN>;
    uint4* sw = reinterpret_cast<uint4*>(st);                    // [16 rows][QUADS]
    for (int i = threadIdx.x; i < ROWS_PER_GROUP * S::QUADS; i += GEMV_THREADS) {
        const int r = i / S::QUADS, c4 = n0 / 4 + i % S::QUADS;
        const bool ok = c4 < N / 4;
        cp_async16(sw + i, qweight + (size_t)(g * ROWS_PER_GROUP + r) * (N / 4) + (ok ? c4 : 0), ok ? 16 : 0);
    }
    const int t = threadIdx.x;
    if (t < S::X_BYTES / 16) {
        cp_async16(st + S::W_BYTES + 16 * t, x + g * GROUP + 8 * t);
    } else if (t < S::X_BYTES / 16 + S::S_BYTES / 16) {
        const int c = t - S::X_BYTES / 16, col = n0 + 8 * c;     // 8 scales per 16 bytes
        const bool ok = col < N;
        cp_async16(st + S::W_BYTES + S::X_BYTES + 16 * c, scales + (size_t)g * N + (ok ? col : 0), ok ? 16 : 0);
    } else if (t < S::X_BYTES / 16 + S::S_BYTES / 16 + S::Z_BYTES / 4) {
        // one word per thread: a qzeros row (N/8 words) starts 16-byte aligned only when N % 32 == 0
        const int c = t - S::X_BYTES / 16 - S::S_BYTES / 16, word = n0 / 8 + c;
        const bool ok = word < N / 8;
        cp_async4(st + S::W_BYTES + S::X_BYTES + S::S_BYTES + 4 * c, qzeros + (size_t)g * (N / 8) + (ok ? word : 0),
                  ok ? 4 : 0);
    }
}

// [[snippet: w4a16_gemv_v2]]
template <int BN, int STAGES>
__global__ void __launch_bounds__(GEMV_THREADS) w4a16_gemv_v2_pipelined(
    const uint4* __restrict__ qweight,          // [K/8, N/4] uint4 = [K/8, N] int32
    const unsigned* __restrict__ qzeros,        // [K/128, N/8]
    const __nv_bfloat16* __restrict__ scales,   // [K/128, N]
    const __nv_bfloat16* __restrict__ x,        // [K]
    __nv_bfloat16* __restrict__ out,            // [N]
    float* __restrict__ ws,                     // [splits, N] fp32 partial sums (splits > 1)
    unsigned* __restrict__ counters,            // [gridDim.x] zero between launches
    int K, int N) {
    using S = GemvStage<BN>;
    constexpr int ROW_THREADS = GEMV_THREADS / S::QUADS;          // threads sharing one column quad
    constexpr int ROWS_PER_THREAD = ROWS_PER_GROUP / ROW_THREADS;
    static_assert(ROWS_PER_GROUP % ROW_THREADS == 0, "BN must be 64, 128 or 256");
    extern __shared__ __align__(16) unsigned char smem[];       // [STAGES][S::BYTES]
    const int n0 = blockIdx.x * BN, split = blockIdx.y, splits = gridDim.y;
    const int groups = K / GROUP;
    const int g_begin = (int)((long long)split * groups / splits);
    const int g_count = (int)((long long)(split + 1) * groups / splits) - g_begin;
    const int quad = threadIdx.x % S::QUADS, rb = threadIdx.x / S::QUADS;

    // prologue: STAGES - 1 groups in flight before any arithmetic
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < g_count) gemv_load_stage<BN>(smem + s * S::BYTES, g_begin + s, n0, N, qweight, qzeros, scales, x);
        cp_async_commit();                                       // empty groups keep the count uniform
    }
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    for (int i = 0; i < g_count; ++i) {
        cp_async_wait<STAGES - 2>();                             // group i has landed (this thread's part)
        __syncthreads();                                         // ... everyone's; slot (i-1) % STAGES is free
        const int nxt = i + STAGES - 1;
        if (nxt < g_count)
            gemv_load_stage<BN>(smem + (nxt % STAGES) * S::BYTES, g_begin + nxt, n0, N, qweight, qzeros, scales, x);
        cp_async_commit();

        const unsigned char* st = smem + (i % STAGES) * S::BYTES;
        const uint4* sw = reinterpret_cast<const uint4*>(st);
        const uint4* sx = reinterpret_cast<const uint4*>(st + S::W_BYTES);
        const uint2 sv = reinterpret_cast<const uint2*>(st + S::W_BYTES + S::X_BYTES)[quad];      // s of 4 columns
        const unsigned zw = reinterpret_cast<const unsigned*>(st + S::W_BYTES + S::X_BYTES + S::S_BYTES)[quad / 2]
                            >> ((quad & 1) * 16);                                                    // z of 4 columns
        __nv_bfloat162 zb[4];
#pragma unroll
        for (int c = 0; c < 4; ++c) zb[c] = u32_as_bf162(bf16x2_biased_zero((zw >> (4 * c)) & 0xfu));
        float gacc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int r = 0; r < ROWS_PER_THREAD; ++r) {
            const int row = rb + r * ROW_THREADS;                 // qweight row within the group
            gemv_dot_row(sw[row * S::QUADS + quad], sx[row], zb, gacc);
        }
        gemv_apply_scales(gacc, sv, acc);
    }
    cp_async_wait<0>();
    __syncthreads();                                             // stage memory is free: reuse it
    float* red = reinterpret_cast<float*>(smem);                 // [ROW_THREADS][BN]
#pragma unroll
    for (int c = 0; c < 4; ++c) red[rb * BN + 4 * quad + c] = acc[c];
    __syncthreads();
    const int col = n0 + threadIdx.x;
    float sum = 0.f;
    if (threadIdx.x < BN) {
#pragma unroll
        for (int r = 0; r < ROW_THREADS; ++r) sum += red[r * BN + threadIdx.x];
    }
    gemv_splitk_store(sum, threadIdx.x < BN && col < N, col, out, ws, counters + blockIdx.x, split, splits, N);
}
// [[/snippet]]
