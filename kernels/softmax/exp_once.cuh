// exp_once.cuh: one exponential per element (chapter 6, v10 and v11): the sum pass keeps e = e^{x - m_t}
// in the chunk registers in place of x, and the write only multiplies.
#pragma once

#include "raw.cuh"

// [[snippet: softmax_exp_once]]
// v10 and v11: one exponential per element. v5-v9 take e^{x - m_t} for the thread's sum and then
// e^{x - m} again for the output: two MUFU.EX2 per element, and MUFU issues 16 per clock per SM, an
// eighth of the FP32 rate. At 1024 x 65536 bf16 that is ~32 us of exponentials on the whole chip against
// a 63 us floor for the bytes, and in a cluster kernel they sit between the read and the write.
// The sum pass here writes e = e^{x - m_t} back over x in the chunk registers (fp32 bits for fp32; for
// bf16 the value rounded to bf16, and the sum taken over the rounded values, so the outputs still sum
// to 1 before their own rounding), and the write is y = e * (e^{m_t - m} / l): one multiply per
// element, one exponential per thread. Registers are unchanged (e takes x's bits).
template <typename T>
__device__ __forceinline__ float round_to(float v) {
    return sizeof(T) == 4 ? v : __bfloat162float(__float2bfloat16_rn(v));
}

template <typename T, int NC>
__device__ __forceinline__ SoftmaxState softmax_chunks_exp_in_place(uint4 (&q)[NC]) {
    constexpr int VEC = Chunk<T>::VEC;
    const float m_t = raw_max<T, NC>(q);
    const float m_safe = softmax_safe_max(m_t);
    float l_t = 0.f;
#pragma unroll
    for (int j = 0; j < NC; ++j) {
        float v[VEC];
        unpack(q[j], v);
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
            v[k] = round_to<T>(softmax_exp(v[k], m_safe));
            l_t += v[k];
        }
        q[j] = pack_raw(v);                     // exact: the values are already representable in T
    }
    return {m_t, l_t};
}

// y = e * (e^{m_t - m} / l): 0 where the thread saw only -inf (e = 0), NaN for a fully masked row (1/l).
template <typename T, int NC>
__device__ __forceinline__ void softmax_scaled_write(T* __restrict__ row, int first, int stride, int cols,
                                                     bool vec_ok, const uint4 (&q)[NC], float m_t,
                                                     SoftmaxState row_state) {
    constexpr int VEC = Chunk<T>::VEC;
    const float c = softmax_rescale(m_t, row_state.m) * softmax_inv_sum(row_state);
#pragma unroll
    for (int j = 0; j < NC; ++j) {
        float v[VEC];
        unpack(q[j], v);
#pragma unroll
        for (int k = 0; k < VEC; ++k) v[k] *= c;
        store_chunk(row, first + j * stride, cols, vec_ok, v);
    }
}

// [[/snippet]]
