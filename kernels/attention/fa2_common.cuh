// fa2_common.cuh: what the tensor-core FlashAttention forward versions share (chapter 15): the masking rule, the
// per-row online softmax of a warp's m16 accumulator tiles, the accumulator -> A-operand repacking of P, and the
// epilogue. Fragment layouts are mma_sm80.cuh's (m16n8k16, lane = 4 g + t): a thread holds rows g and g + 8 of its
// warp's 16 rows, and columns 2t, 2t + 1 of every n8 tile; the four lanes of a quad (same g) share a row.
#pragma once
#include <cuda_bf16.h>

#include "mma_sm80.cuh"
#include "online_softmax.cuh"

// How many keys query row i sees (keys 0 .. n - 1): every key, or bottom-right causal i + Sk - Sq + 1, clipped;
// none for rows past Sq.
__device__ __forceinline__ int attn_visible(int i, int Sq, int Sk, int causal) {
    return i >= Sq ? 0 : causal ? max(0, min(Sk, i + Sk - Sq + 1)) : Sk;
}

__device__ __forceinline__ unsigned pack_bf16x2(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);   // .x (low half) = lo
    return *reinterpret_cast<const unsigned*>(&v);
}

// Max and sum over the four lanes of a quad: the whole of one row of an m16 tile.
__device__ __forceinline__ float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

template <int NT>
__device__ __forceinline__ void fa2_zero(float (&acc)[NT][4]) {
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[n][e] = 0.f;
}

// Scores of keys this thread's rows do not see become -inf: key j0 + 8n + 2t (+1) against row g's (lim[0]) and
// row g + 8's (lim[1]) visible-key counts (attn_visible; keys past Sk are never visible).
template <int NT>
__device__ __forceinline__ void fa2_mask(float (&s)[NT][4], int j0, const int (&lim)[2]) {
    const int t = threadIdx.x % 4;
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e)
            if (j0 + 8 * n + 2 * t + (e & 1) >= lim[e >> 1]) s[n][e] = SOFTMAX_NEG_INF;
}

// [[snippet: fa2_softmax_tile]]
// One key tile of the online softmax for this thread's two rows (h = 0: row g, 1: row g + 8). s holds the raw
// scores of NT n8 tiles, already -inf where masked. Each row's max is taken over its quad, so the four lanes agree
// on m; l stays a per-lane partial sum (rescaled by the same alpha), added over the quad once at the end. On return
// s holds P = e^{(s - m) scale}, and o has been multiplied by the rows' alpha. P is taken as
// exp2(s scale_log2 - m scale_log2), one FFMA a score (flash-attention does the same) instead of online_softmax.cuh's
// subtract-then-multiply: rounding m scale_log2 shifts every exponent of a row by the same amount, at most
// |m scale_log2| 2^-24, a common factor of the row's P and l that the division by l cancels.
template <int NT, int OT>
__device__ __forceinline__ void fa2_softmax_tile(float (&s)[NT][4], SoftmaxState (&st)[2], float (&o)[OT][4],
                                                 float scale_log2) {
    float mx[2] = {SOFTMAX_NEG_INF, SOFTMAX_NEG_INF};
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) mx[e >> 1] = fmaxf(mx[e >> 1], s[n][e]);
    float alpha[2], m_scaled[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        alpha[h] = softmax_state_advance(st[h], quad_max(mx[h]), scale_log2);
        m_scaled[h] = softmax_safe_max(st[h].m) * scale_log2;
    }
#pragma unroll
    for (int n = 0; n < OT; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[n][e] *= alpha[e >> 1];
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            s[n][e] = exp2f(fmaf(s[n][e], scale_log2, -m_scaled[e >> 1]));
            st[e >> 1].l += s[n][e];
        }
}
// [[/snippet]]

// [[snippet: fa2_p_as_a]]
// P's accumulators of the n8 tiles 2kk and 2kk + 1 (keys 16 kk .. 16 kk + 15) are, element for element, the A
// fragment of an m16n8k16 whose k runs over those 16 keys: a[0] = row g, keys 2t..; a[1] = row g + 8; a[2], a[3]
// the same 8 keys further. Rounding to bf16 and packing pairs is all it takes: no shuffle, no shared memory.
template <int NT>
__device__ __forceinline__ void fa2_p_as_a(const float (&p)[NT][4], int kk, unsigned (&a)[4]) {
    a[0] = pack_bf16x2(p[2 * kk][0], p[2 * kk][1]);
    a[1] = pack_bf16x2(p[2 * kk][2], p[2 * kk][3]);
    a[2] = pack_bf16x2(p[2 * kk + 1][0], p[2 * kk + 1][1]);
    a[3] = pack_bf16x2(p[2 * kk + 1][2], p[2 * kk + 1][3]);
}
// [[/snippet]]

// Normalise and store this thread's part of its warp's 16 output rows (row0 = the warp's first row), and the
// rows' lse from lane t = 0 of each quad; rows past Sq are skipped. o[n] covers head-dimension columns 8n .. 8n + 7;
// out's rows lie ``stride`` elements apart (D, or H D in varlen's packed layout), lse's next to each other.
template <int OT>
__device__ __forceinline__ void fa2_store(const float (&o)[OT][4], SoftmaxState (&st)[2], __nv_bfloat16* out_head,
                                          float* lse_head, int row0, int Sq, float scale, int stride = 8 * OT) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const float l = quad_sum(st[h].l);
        const int i = row0 + g + 8 * h;
        if (i >= Sq) continue;
        const float inv = l > 0.f ? 1.f / l : 0.f;              // a row that saw no key: out = 0, lse = -inf
#pragma unroll
        for (int n = 0; n < OT; ++n)
            *reinterpret_cast<unsigned*>(out_head + (size_t)i * stride + 8 * n + 2 * t) =
                pack_bf16x2(o[n][2 * h] * inv, o[n][2 * h + 1] * inv);
        if (t == 0) lse_head[i] = l > 0.f ? st[h].m * scale + logf(l) : SOFTMAX_NEG_INF;
    }
}
