// raw.cuh: the raw-chunk core of v5-v11 (chapter 6): 16-byte chunks kept as the bits that came from
// memory, widened only where a pass needs floats.
#pragma once

#include "chunks.cuh"
#include "row_stream.cuh"

// [[snippet: softmax_raw]]
// The raw-chunk core of v5 and v6. A thread keeps its NC chunks exactly as they came from memory:
// one 16-byte chunk = 4 registers whatever the dtype, so a bf16 thread holds 8 elements per 4 registers
// where v2-v4 hold 4 (they widen to fp32 on load). Bytes resident per register double for bf16; the price
// is a second exponential at the write (y = e^{x - m} / l is recomputed from x instead of rescaled).
// Elements past the row's end are stored as -inf bits, so they weigh 0 in every pass.
// unpack (shift / mask) and unpack_prmt (the same through PRMT, for the sum pass) live in
// row_stream.cuh, shared with chapter 7. The sum pass uses unpack_prmt: were both passes to use unpack,
// the compiler would keep the widened floats of the sum pass alive across the merge for the write pass
// (common subexpressions), and a bf16 thread would hold 8 registers per chunk again instead of 4.

// Max of the raw chunks: fp32 widened as is; bf16 compared two at a time on the packed pairs (a bf16 max
// is exact), so no widened copy of the row exists before the sum pass.
template <typename T, int NC>
__device__ __forceinline__ float raw_max(const uint4 (&q)[NC]) {
    if constexpr (sizeof(T) == 4) {
        float m = SOFTMAX_NEG_INF;
#pragma unroll
        for (int j = 0; j < NC; ++j) {
            float v[4];
            unpack(q[j], v);
#pragma unroll
            for (int k = 0; k < 4; ++k) m = fmaxf(m, v[k]);
        }
        return m;
    } else {
        __nv_bfloat162 m2 = __bfloat162bfloat162(__ushort_as_bfloat16(0xff80u));   // (-inf, -inf)
#pragma unroll
        for (int j = 0; j < NC; ++j) {
            const unsigned w[4] = {q[j].x, q[j].y, q[j].z, q[j].w};
#pragma unroll
            for (int k = 0; k < 4; ++k) m2 = __hmax2(m2, *reinterpret_cast<const __nv_bfloat162*>(&w[k]));
        }
        return fmaxf(__low2float(m2), __high2float(m2));
    }
}

__device__ __forceinline__ unsigned raw_bits(float v) { return __float_as_uint(v); }
__device__ __forceinline__ unsigned raw_bits(__nv_bfloat16 v) { return __bfloat16_as_ushort(v); }

template <typename T>
__device__ __forceinline__ void load_raw(const T* __restrict__ row, int c, int cols, bool vec_ok, uint4& q) {
    constexpr int VEC = Chunk<T>::VEC;
    constexpr int BITS = 8 * (int)sizeof(T);
    constexpr unsigned NEG_INF = sizeof(T) == 4 ? 0xff800000u : 0xff80u;
    const int e0 = c * VEC;
    if (vec_ok && e0 < cols) {
        q = __ldg(reinterpret_cast<const uint4*>(row + e0));
    } else {
        unsigned w[4] = {0u, 0u, 0u, 0u};
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
            const unsigned b = e0 + k < cols ? raw_bits(row[e0 + k]) : NEG_INF;
            w[k * BITS / 32] |= b << ((k * BITS) % 32);
        }
        q = make_uint4(w[0], w[1], w[2], w[3]);
    }
}

// The thread's (m_t, l_t) over NC raw chunks (wherever they came from: registers for v5-v7, smem for v9).
template <typename T, int NC>
__device__ __forceinline__ SoftmaxState softmax_chunks_state(const uint4 (&q)[NC]) {
    constexpr int VEC = Chunk<T>::VEC;
    const float m_t = raw_max<T, NC>(q);
    const float m_safe = softmax_safe_max(m_t);
    float l_t = 0.f;
#pragma unroll
    for (int j = 0; j < NC; ++j) {
        float v[VEC];
        unpack_prmt(q[j], v);
#pragma unroll
        for (int k = 0; k < VEC; ++k) l_t += softmax_exp(v[k], m_safe);
    }
    return {m_t, l_t};
}

// Load NC chunks (first + j * stride) and return the thread's (m_t, l_t); q keeps the raw bits.
template <typename T, int NC>
__device__ __forceinline__ SoftmaxState softmax_raw_state(const T* __restrict__ row, int first, int stride, int cols,
                                                          bool vec_ok, uint4 (&q)[NC]) {
    constexpr int VEC = Chunk<T>::VEC;
#pragma unroll
    for (int j = 0; j < NC; ++j) load_raw(row, first + j * stride, cols, vec_ok, q[j]);
    return softmax_chunks_state<T, NC>(q);
}

// y = e^{x - m} / l from the raw chunks and the row's merged state (a fully masked row gives NaN).
template <typename T, int NC>
__device__ __forceinline__ void softmax_raw_write(T* __restrict__ row, int first, int stride, int cols, bool vec_ok,
                                                  const uint4 (&q)[NC], SoftmaxState row_state) {
    constexpr int VEC = Chunk<T>::VEC;
    const float m_safe = softmax_safe_max(row_state.m);
    const float inv_l = softmax_inv_sum(row_state);
#pragma unroll
    for (int j = 0; j < NC; ++j) {
        float v[VEC];
        unpack(q[j], v);
#pragma unroll
        for (int k = 0; k < VEC; ++k) v[k] = softmax_exp(v[k], m_safe) * inv_l;
        store_chunk(row, first + j * stride, cols, vec_ok, v);
    }
}

// Blocks per SM that ptxas should make room for: the register file (64 Ki registers) over an estimate
// of 4 registers per chunk plus ~28 for addresses and state, at most 2048 threads. __launch_bounds__
// turns this into a register cap, so a block size that would otherwise leave half an SM idle cannot.
template <int NC, int THREADS>
struct RawOccupancy {
    static constexpr int REGS = ((4 * NC + 28) + 7) / 8 * 8;
    static constexpr int BY_REGS = 65536 / (THREADS * REGS);
    static constexpr int BY_THREADS = 2048 / THREADS;
    static constexpr int MIN_BLOCKS = BY_REGS < 1 ? 1 : (BY_REGS < BY_THREADS ? BY_REGS : BY_THREADS);
};
// [[/snippet]]
