// registers.cuh: the one-read core of v2, v3, v4 and v8 (chapter 6): a thread's chunks of a row held
// in registers as floats, its state (m_t, l_t), and the write once the row's (m, l) is known.
#pragma once

#include "chunks.cuh"

// [[snippet: softmax_registers]]
// The one-read core of v2, v3 and v4: NC chunks of a row in registers, chunk j of this thread at
// index first + j * stride. The thread takes its local max, turns the values into e^{x - m_t} in place
// and sums them: its state (m_t, l_t). After the caller has merged the states into the row's (m, l),
// softmax_write scales each value by e^{m_t - m} / l and stores it. softmax_values_state is the part
// after the loads (v8 widens its rows from raw chunks itself).
template <int NC, int VEC>
__device__ __forceinline__ SoftmaxState softmax_values_state(float (&v)[NC][VEC]) {
    float m_t = SOFTMAX_NEG_INF;
#pragma unroll
    for (int j = 0; j < NC; ++j)
#pragma unroll
        for (int k = 0; k < VEC; ++k) m_t = fmaxf(m_t, v[j][k]);
    const float m_safe = softmax_safe_max(m_t);
    float l_t = 0.f;
#pragma unroll
    for (int j = 0; j < NC; ++j)
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
            v[j][k] = softmax_exp(v[j][k], m_safe);
            l_t += v[j][k];
        }
    return {m_t, l_t};
}

template <typename T, int NC>
__device__ __forceinline__ SoftmaxState softmax_thread_state(const T* __restrict__ row, int first, int stride,
                                                             int cols, bool vec_ok,
                                                             float (&v)[NC][Chunk<T>::VEC]) {
    constexpr int VEC = Chunk<T>::VEC;
#pragma unroll
    for (int j = 0; j < NC; ++j) load_chunk(row, first + j * stride, cols, vec_ok, v[j]);
    return softmax_values_state<NC, VEC>(v);
}

template <typename T, int NC>
__device__ __forceinline__ void softmax_write(T* __restrict__ row, int first, int stride, int cols, bool vec_ok,
                                              float (&v)[NC][Chunk<T>::VEC], float m_t, SoftmaxState row_state) {
    constexpr int VEC = Chunk<T>::VEC;
    // e^{m_t - m} / l; a fully masked row gives 0 * NaN = NaN, as torch.softmax does
    const float factor = softmax_rescale(m_t, row_state.m) * softmax_inv_sum(row_state);
#pragma unroll
    for (int j = 0; j < NC; ++j) {
#pragma unroll
        for (int k = 0; k < VEC; ++k) v[j][k] *= factor;
        store_chunk(row, first + j * stride, cols, vec_ok, v[j]);
    }
}
// [[/snippet]]
