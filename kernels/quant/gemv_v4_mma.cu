// gemv_v4_mma.cu: W4A16 GEMV v4 (parent v1): tensor cores for batch 1 on the shuffled weights;
// the biased codes 128 + q go to mma.sync, zero point and scale once per group.
#include "mma_frags.cuh"
#include "gemv_common.cuh"

// ---------------------------------------------------------------------------------------------------
// W4A16 GEMV v4: tensor cores for batch 1, fewer instructions per weight. Run 2 showed that more bytes
// in flight (v3) did not help v1; v1's SASS issues ~2.8 instructions per weight (per 8 weights: 3 shifts,
// 4 lop3, 4 zero subtractions, 4 bf16x2 FMAs, 2 unpacks and 2 fp32 adds; + x loads and prmt per row).
// v4 reads the Marlin-shuffled weights (qmma) and per 8 weights issues 3 shifts + 4 lop3 + 2 HMMA:
//  * the biased codes 128 + q go straight into the mma (no subtraction per weight); the zero point is
//    folded into one correction per group and column: sum_k x (q - z) = sum_k x (128 + q) - (128 + z) sum_k x,
//    where sum_k x comes from one more mma per k16 tile with B = 1 (shared by the warp's NTW tiles);
//  * the scale is applied once per group and column, in fp32, after the mma;
//  * the mma sums in fp32 (products of bf16 are exact), so the accuracy is better than v1's bf16x2 sums.
// Only row 0 of the m16 tile is real (A rows 1..15 are zero): 15/16 of each HMMA is wasted, which costs
// tensor-pipe time (~1 us per 8192 x 8192) but no extra instructions per weight.
// CTA: WARPS warps x NTW n16 tiles (16 NTW columns); warp w takes the groups [w G / WARPS, (w+1) G / WARPS).
// Weights are register double-buffered in batches of V4_BATCH groups (NTW x 2 V4_BATCH uint4 per lane).
// Register caps: 85 for NTW = 1 (64 spilled), 128 for NTW = 2.
// Requires K % 128 == 0 and N % 16 == 0 (the shuffle's tiles).
// ---------------------------------------------------------------------------------------------------
#define V4_BATCH 1                     // groups per register batch: 2 uint4 (32 B) per lane per n16 tile

template <int NTW>
__device__ __forceinline__ void gemv_v4_load(uint4 (&w)[NTW][2 * V4_BATCH], const uint4* const (&wp)[NTW],
                                             int grp, int g_end) {
#pragma unroll
    for (int i = 0; i < NTW; ++i)
#pragma unroll
        for (int c = 0; c < 2 * V4_BATCH; ++c) {
            const int kc = 2 * grp + c;                      // k64 chunk
            w[i][c] = kc < 2 * g_end ? __ldcs(wp[i] + (size_t)kc * 32) : make_uint4(0u, 0u, 0u, 0u);
        }
}

// [[snippet: w4a16_gemv_v4_group]]
// One group (128 k) of the warp's NTW n16 tiles: 8 k16 steps of mma on the biased codes, then per column
// acc += s * (sum x (128 + q) - (128 + z) sum x). w holds the group's two k64 chunks per tile.
template <int NTW>
__device__ __forceinline__ void gemv_v4_group(const uint4 (&w)[NTW][2], int grp, const __nv_bfloat16* __restrict__ x,
                                              const unsigned* __restrict__ qzeros, const __nv_bfloat16* __restrict__ scales,
                                              const int (&nt)[NTW], int N, float (&acc)[NTW][2][2]) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    float gacc[NTW][2][4], xs[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int i = 0; i < NTW; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int e = 0; e < 4; ++e) gacc[i][h][e] = 0.f;
    const unsigned* xw = reinterpret_cast<const unsigned*>(x + (size_t)grp * GROUP) + t;   // pairs (2t, 2t+1)
#pragma unroll
    for (int j = 0; j < 8; ++j) {                           // k16 steps
        unsigned a[4] = {0u, 0u, 0u, 0u};                   // A row g: only row 0 is x, the rest zero
        if (g == 0) { a[0] = __ldg(xw + 8 * j); a[2] = __ldg(xw + 8 * j + 4); }
        mma_m16n8k16_bf16(xs, a, BF16X2_ONE, BF16X2_ONE);   // xs[0] = xs[1] = sum of x over the step
#pragma unroll
        for (int i = 0; i < NTW; ++i) {
            const uint4 v = w[i][j >> 2];
            const unsigned word = (j & 3) == 0 ? v.x : (j & 3) == 1 ? v.y : (j & 3) == 2 ? v.z : v.w;
            unsigned b[4];
            int4x8_to_bf16x8_biased(word, b);               // 128 + q, exact; no zero subtraction
            mma_m16n8k16_bf16(gacc[i][0], a, b[0], b[1]);  // n8 tile at columns 0..7 of the n16 tile
            mma_m16n8k16_bf16(gacc[i][1], a, b[2], b[3]);  // columns 8..15
        }
    }
    if (g == 0) {                                           // lanes holding row 0: columns 2t, 2t + 1 of each n8 tile
#pragma unroll
        for (int i = 0; i < NTW; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int col = nt[i] * 16 + h * 8 + 2 * t;
                const unsigned zw = qzeros[(size_t)grp * (N / 8) + (col >> 3)] >> ((col & 7) * 4);
                const unsigned sv = *reinterpret_cast<const unsigned*>(scales + (size_t)grp * N + col);
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const float zb = 128.f + float((zw >> (4 * e)) & 0xfu);
                    const float d = fmaf(-zb, xs[0], gacc[i][h][e]);          // sum x (q - z), fp32
                    acc[i][h][e] = fmaf(e == 0 ? bf16_lo(sv) : bf16_hi(sv), d, acc[i][h][e]);
                }
            }
    }
}
// [[/snippet]]

// [[snippet: w4a16_gemv_v4]]
template <int NTW, int WARPS>
__global__ void __launch_bounds__(32 * WARPS, (NTW == 1 ? 768 : 512) / (32 * WARPS)) w4a16_gemv_v4_mma(
    const uint4* __restrict__ qmma,             // [N/16, K/64, 32, 4] int32 as [N/16, K/64, 32] uint4
    const unsigned* __restrict__ qzeros,        // [K/128, N/8]
    const __nv_bfloat16* __restrict__ scales,   // [K/128, N]
    const __nv_bfloat16* __restrict__ x,        // [K]
    __nv_bfloat16* __restrict__ out,            // [N]
    int K, int N) {
    __shared__ float red[WARPS][NTW * 16];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int ntiles = N / 16, kchunks = K / 64, groups = K / GROUP;
    const int g_begin = (int)((long long)warp * groups / WARPS);
    const int g_end = (int)((long long)(warp + 1) * groups / WARPS);
    int nt[NTW];
    const uint4* wp[NTW];
#pragma unroll
    for (int i = 0; i < NTW; ++i) {
        nt[i] = min((int)blockIdx.x * NTW + i, ntiles - 1);      // clamped in bounds; never stored twice
        wp[i] = qmma + (size_t)nt[i] * kchunks * 32 + lane;
    }
    float acc[NTW][2][2];
#pragma unroll
    for (int i = 0; i < NTW; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) acc[i][h][0] = acc[i][h][1] = 0.f;

    uint4 cur[NTW][2 * V4_BATCH], nxt[NTW][2 * V4_BATCH];
    if (g_begin < g_end) gemv_v4_load<NTW>(cur, wp, g_begin, g_end);
    for (int b0 = g_begin; b0 < g_end; b0 += V4_BATCH) {
        if (b0 + V4_BATCH < g_end) gemv_v4_load<NTW>(nxt, wp, b0 + V4_BATCH, g_end);   // in flight meanwhile
#pragma unroll
        for (int h = 0; h < V4_BATCH; ++h) {
            if (b0 + h < g_end) {
                uint4 wg[NTW][2];
#pragma unroll
                for (int i = 0; i < NTW; ++i) { wg[i][0] = cur[i][2 * h]; wg[i][1] = cur[i][2 * h + 1]; }
                gemv_v4_group<NTW>(wg, b0 + h, x, qzeros, scales, nt, N, acc);
            }
        }
#pragma unroll
        for (int i = 0; i < NTW; ++i)
#pragma unroll
            for (int c = 0; c < 2 * V4_BATCH; ++c) cur[i][c] = nxt[i][c];
    }
    if (g == 0) {
#pragma unroll
        for (int i = 0; i < NTW; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                red[warp][i * 16 + h * 8 + 2 * t] = acc[i][h][0];
                red[warp][i * 16 + h * 8 + 2 * t + 1] = acc[i][h][1];
            }
    }
    __syncthreads();
    if (threadIdx.x < NTW * 16) {
        float sum = 0.f;
#pragma unroll
        for (int w = 0; w < WARPS; ++w) sum += red[w][threadIdx.x];   // fixed order: deterministic
        const int tile = blockIdx.x * NTW + threadIdx.x / 16;
        if (tile < ntiles) out[tile * 16 + threadIdx.x % 16] = __float2bfloat16_rn(sum);
    }
}
// [[/snippet]]
