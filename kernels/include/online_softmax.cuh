// online_softmax.cuh: the online-softmax state (m, l) and its merge (Milakov & Gimelshein, 2018).
//
// For a set of scores x_1..x_n the state is
//     m = max_i x_i                       (running maximum)
//     l = sum_i e^{x_i - m}               (normalizer, relative to m)
// and softmax(x)_i = e^{x_i - m} / l. Two states of disjoint sets merge into the state of their union:
//     m = max(m_a, m_b),   l = l_a * e^{m_a - m} + l_b * e^{m_b - m}
// The merge is commutative and associative (exactly in real arithmetic, up to rounding in fp32), with
// identity (-inf, 0): a row may be split any way -- across the registers of one thread, the lanes of a
// warp, the warps of a block, the blocks of a cluster -- and the pieces merged in any tree. Chapter 6
// (softmax) and chapter 15 (FlashAttention forward) both use it: FlashAttention's "rescale O by
// e^{m_old - m_new}" is softmax_state_advance's return value.
//
// Exponentials are taken as exp2f((x - m) * scale_log2): the subtraction comes first (exact when x is
// close to m, so logits of 1e4 keep their precision), the multiply folds in log2(e) and, for
// attention, the softmax scale 1/sqrt(d). -inf conventions: a score of -inf contributes exactly 0;
// a state that has seen only -inf is (-inf, 0) and never produces NaN inside a merge.
#pragma once

#include "common.cuh"

#define SOFTMAX_NEG_INF __int_as_float(0xff800000)
#define SOFTMAX_NAN __int_as_float(0x7fffffff)
#define SOFTMAX_LOG2E 1.4426950408889634f

// [[snippet: online_state]]
struct SoftmaxState {
    float m;  // running max of the scores seen (-inf before any)
    float l;  // sum of e^{(x - m)} over the scores seen, relative to the current m
};

__device__ __forceinline__ SoftmaxState softmax_state_empty() { return {SOFTMAX_NEG_INF, 0.f}; }

// The max to subtract: m itself, or 0 while m is -inf (so e^{-inf - 0} = 0 instead of e^{NaN}).
__device__ __forceinline__ float softmax_safe_max(float m) { return m == SOFTMAX_NEG_INF ? 0.f : m; }

// e^{(x - m) * scale}, computed as exp2f((x - m) * scale_log2), scale_log2 = scale * log2(e).
__device__ __forceinline__ float softmax_exp(float x, float m_safe, float scale_log2 = SOFTMAX_LOG2E) {
    return exp2f((x - m_safe) * scale_log2);
}

// e^{(m_old - m_new) * scale}: the factor that moves a sum taken relative to m_old onto m_new.
// 0 when m_new is -inf (then nothing has been seen and every sum is 0 anyway).
__device__ __forceinline__ float softmax_rescale(float m_old, float m_new, float scale_log2 = SOFTMAX_LOG2E) {
    return m_new == SOFTMAX_NEG_INF ? 0.f : exp2f((m_old - m_new) * scale_log2);
}

// Move the state to max(m, tile_max). l is rescaled here; the caller then adds the tile's
// sum of softmax_exp(x, softmax_safe_max(s.m)). Returns alpha = e^{m_old - m_new}, the factor by which
// anything else accumulated under the old max (FlashAttention's output row O) must be multiplied.
__device__ __forceinline__ float softmax_state_advance(SoftmaxState& s, float tile_max,
                                                       float scale_log2 = SOFTMAX_LOG2E) {
    const float m_new = fmaxf(s.m, tile_max);
    const float alpha = softmax_rescale(s.m, m_new, scale_log2);
    s.m = m_new;
    s.l *= alpha;
    return alpha;
}

// The recurrence of the paper, one score at a time: m' = max(m, x), l' = l e^{m - m'} + e^{x - m'}.
__device__ __forceinline__ void softmax_state_update(SoftmaxState& s, float x, float scale_log2 = SOFTMAX_LOG2E) {
    softmax_state_advance(s, x, scale_log2);
    s.l += softmax_exp(x, softmax_safe_max(s.m), scale_log2);
}

// The merge operator: the state of the union of two disjoint sets. Commutative in m bit for bit; in l
// only up to the last bit, because the compiler may contract one of the two products into an FMA
// (fma(b.l, r_b, a.l * r_a)), so merge(a, b) and merge(b, a) round differently.
__device__ __forceinline__ SoftmaxState softmax_state_merge(SoftmaxState a, SoftmaxState b,
                                                            float scale_log2 = SOFTMAX_LOG2E) {
    const float m = fmaxf(a.m, b.m);
    return {m, a.l * softmax_rescale(a.m, m, scale_log2) + b.l * softmax_rescale(b.m, m, scale_log2)};
}

// [[/snippet]]

// [[snippet: online_merge_tree]]
// Merge the 32 states of a warp (butterfly): every lane ends with the same bits, because at each step
// both lanes of a pair merge the same two operands in the same order (the lower lane's state first).
__device__ __forceinline__ SoftmaxState softmax_warp_merge(SoftmaxState s, float scale_log2 = SOFTMAX_LOG2E) {
    unsigned lane;
    asm("mov.u32 %0, %%laneid;" : "=r"(lane));
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        SoftmaxState o{__shfl_xor_sync(FULL_MASK, s.m, offset), __shfl_xor_sync(FULL_MASK, s.l, offset)};
        s = (lane & offset) ? softmax_state_merge(o, s, scale_log2) : softmax_state_merge(s, o, scale_log2);
    }
    return s;
}

// Merge the states of all THREADS threads of a block; every thread gets the result.
// `scratch` is [THREADS / 32] states in shared memory; one __syncthreads inside; call once per kernel
// (or separate two calls by a __syncthreads).
template <int THREADS>
__device__ __forceinline__ SoftmaxState softmax_block_merge(SoftmaxState s, SoftmaxState* scratch,
                                                            float scale_log2 = SOFTMAX_LOG2E) {
    static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: a multiple of 32, at most 1024");
    constexpr int WARPS = THREADS / 32;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    s = softmax_warp_merge(s, scale_log2);
    if (WARPS == 1) return s;
    if (lane == 0) scratch[warp] = s;
    __syncthreads();
    s = lane < WARPS ? scratch[lane] : softmax_state_empty();
    return softmax_warp_merge(s, scale_log2);   // every warp merges the same WARPS states
}
// [[/snippet]]

// 1 / l for the final normalization; a state that saw only -inf (l = 0) gives NaN, as torch.softmax
// does for a fully masked row. (FlashAttention, chapter 15, chooses 0 there instead.)
__device__ __forceinline__ float softmax_inv_sum(SoftmaxState s) {
    return s.l > 0.f ? 1.f / s.l : SOFTMAX_NAN;
}
