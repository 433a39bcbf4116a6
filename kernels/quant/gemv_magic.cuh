// gemv_magic.cuh: the body of GEMV v1 (and of v6, which changes only where the weights live).
#pragma once
#include "gemv_common.cuh"

// [[snippet: gemv_magic]]
// The body of v1 (and of v6, which only changes where the weights live): w points at this lane's uint4
// of qweight row 0 (k = 0..7), and the uint4 of row r is r * row_stride further (N / 4 in GPTQ's layout).
__device__ __forceinline__ void gemv_magic(const uint4* __restrict__ w, size_t row_stride,
                                           const unsigned* __restrict__ qzeros,
                                           const __nv_bfloat16* __restrict__ scales,
                                           const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ out,
                                           int K, int N) {
    const int lane_c = threadIdx.x & 7, ks = threadIdx.x >> 3;
    const int n = blockIdx.x * GEMV_COLS + lane_c * 4;
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    if (n < N) {
        const int groups = K / GROUP;
        for (int g = ks; g < groups; g += GEMV_KSLICES) {
            const unsigned zw = qzeros[(size_t)g * (N / 8) + (n >> 3)] >> ((n & 7) * 4);
            const uint2 sv = *reinterpret_cast<const uint2*>(scales + (size_t)g * N + n);
            __nv_bfloat162 zb[4];                       // (128 + z, 128 + z): subtracting it leaves q - z
            float gacc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
            for (int c = 0; c < 4; ++c) zb[c] = u32_as_bf162(bf16x2_biased_zero((zw >> (4 * c)) & 0xfu));
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int r0 = g * ROWS_PER_GROUP + half * 8;
                uint4 wv[8];
#pragma unroll
                for (int r = 0; r < 8; ++r) wv[r] = __ldcs(w + (size_t)(r0 + r) * row_stride);
#pragma unroll
                for (int r = 0; r < 8; ++r)
                    gemv_dot_row(wv[r], __ldg(reinterpret_cast<const uint4*>(x) + r0 + r), zb, gacc);
            }
            gemv_apply_scales(gacc, sv, acc);
        }
    }
    gemv_reduce_store(acc, out, N);
}
// [[/snippet]]
