// gemv_v0_naive.cu: W4A16 GEMV v0: 32 columns x all K per block, 16-byte weight loads,
// shift/mask/int-to-float per nibble, fp32 FMA.
#include "gemv_common.cuh"

// [[snippet: w4a16_gemv_v0]]
extern "C" __global__ void __launch_bounds__(GEMV_THREADS, 2) w4a16_gemv_v0_naive(
    const uint4* __restrict__ qweight,          // [K/8, N/4] uint4 = [K/8, N] int32
    const unsigned* __restrict__ qzeros,        // [K/128, N/8]
    const __nv_bfloat16* __restrict__ scales,   // [K/128, N]
    const __nv_bfloat16* __restrict__ x,        // [K]
    __nv_bfloat16* __restrict__ out,            // [N]
    int K, int N) {
    const int lane_c = threadIdx.x & 7, ks = threadIdx.x >> 3;
    const int n = blockIdx.x * GEMV_COLS + lane_c * 4;      // this lane's columns n .. n+3
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    if (n < N) {                                            // N % 8 == 0: n < N implies n + 3 < N
        const int groups = K / GROUP;
        for (int g = ks; g < groups; g += GEMV_KSLICES) {
            const unsigned zw = qzeros[(size_t)g * (N / 8) + (n >> 3)] >> ((n & 7) * 4);   // z[g, n..n+3]
            const uint2 sv = *reinterpret_cast<const uint2*>(scales + (size_t)g * N + n);     // s[g, n..n+3]
            float z[4], gacc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
            for (int c = 0; c < 4; ++c) z[c] = float((zw >> (4 * c)) & 0xfu);
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int r0 = g * ROWS_PER_GROUP + half * 8;
                uint4 wv[8];                                // [8 rows, 4 columns] int32 in registers
#pragma unroll
                for (int r = 0; r < 8; ++r) wv[r] = __ldcs(qweight + (size_t)(r0 + r) * (N / 4) + (n >> 2));
#pragma unroll
                for (int r = 0; r < 8; ++r) {
                    const uint4 xv = __ldg(reinterpret_cast<const uint4*>(x) + r0 + r);      // x[8(r0+r) .. +7]
                    const float xf[8] = {bf16_lo(xv.x), bf16_hi(xv.x), bf16_lo(xv.y), bf16_hi(xv.y),
                                         bf16_lo(xv.z), bf16_hi(xv.z), bf16_lo(xv.w), bf16_hi(xv.w)};
                    const unsigned wc[4] = {wv[r].x, wv[r].y, wv[r].z, wv[r].w};
#pragma unroll
                    for (int c = 0; c < 4; ++c)
#pragma unroll
                        for (int i = 0; i < 8; ++i)
                            gacc[c] = fmaf(float((wc[c] >> (4 * i)) & 0xfu) - z[c], xf[i], gacc[c]);
                }
            }
            gemv_apply_scales(gacc, sv, acc);
        }
    }
    gemv_reduce_store(acc, out, N);
}
// [[/snippet]]
