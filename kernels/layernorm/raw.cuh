// raw.cuh: the raw-chunk row machinery of LayerNorm v5 / v6 and RMSNorm v4: the row stays in
// registers as the 16-byte chunks that came from memory, unpacked in every pass.
#pragma once
#include "ilp.cuh"
#include "row_stream.cuh"

// [[snippet: norm_raw]]
// The raw-chunk rows of layernorm_v5 / rmsnorm_v4. Same index map as norm_rows (ITEMS values = NC
// chunks of VEC per thread), but a thread keeps its chunks as the 16 bytes that came from memory:
// uint4 q[NC], 4 registers per chunk for fp32 and for bf16 alike, so a bf16 thread holds a row slice
// in half the registers v4 needs. Each pass unpacks what it reads; chunks past the row's end hold
// zero bits (0.0 in both dtypes), which the sum ignores and the other passes skip.
//
// v4 reached 40-73% of copy on the long rows where softmax, with the same layouts and no
// weights, reached 69-96%: the difference is the write pass, which loads w (and b) one chunk at a
// time behind a branch, an L2 round trip per chunk with no x loads in flight. Here the weights come
// in groups of WG chunks, unconditionally (a clamped address past the end), and the first group is
// issued before the reduction so its latency hides behind the barriers.

// unpack_raw (bf16 pairs -> floats by byte permutes, `asm volatile` so that the compiler does not
// compute the widened values once and hold them from one pass to the next, which would cost 8
// registers per bf16 chunk again) and pack_raw live in row_stream.cuh, shared with chapter 6.

// This thread's sum of the values (SQUARE: of their squares) in its raw chunks, two accumulators;
// chunks past the row's end hold zero bits and add nothing.
template <bool SQUARE, int VEC, int NC>
__device__ __forceinline__ float raw_sum(const uint4 (&q)[NC]) {
    float acc[2] = {0.f, 0.f};
#pragma unroll
    for (int j = 0; j < NC; ++j) {
        float v[VEC];
        unpack_raw(q[j], v);
#pragma unroll
        for (int k = 0; k < VEC; ++k) acc[k & 1] = SQUARE ? fmaf(v[k], v[k], acc[k & 1]) : acc[k & 1] + v[k];
    }
    return acc[0] + acc[1];
}

// Weight chunks per group in the write pass (the registers: 4 per chunk for w, 4 more for b).
template <int NC>
__host__ __device__ constexpr int raw_weight_group() { return NC < 2 ? NC : 2; }

// Blocks per SM that __launch_bounds__ asks ptxas to make room for: the register file (64 Ki) over
// an estimate of the registers a thread needs (4 per chunk of x, 8 or 16 for a group of weight
// chunks, ~16 for addresses and statistics, 8 more for a cluster's merge), at most 2048 threads per
// SM. ptxas fills whatever cap it is given (it hoists loads and unpacks), so the estimate must be
// tight to buy occupancy (with 24 instead of 16, the 8-chunk fp32 block of 512 got one block per SM).
template <int NC, int THREADS, bool HAS_B, int CLUSTER>
__host__ __device__ constexpr int raw_blocks_per_sm() {
    constexpr int regs = 4 * NC + 4 * raw_weight_group<NC>() * (HAS_B ? 2 : 1) + (CLUSTER > 1 ? 24 : 16);
    constexpr int by_regs = 65536 / (THREADS * regs);
    constexpr int by_threads = 2048 / THREADS;
    return by_regs < 1 ? 1 : (by_regs < by_threads ? by_regs : by_threads);
}

// Shifted sums (layernorm_v6): with K the row's first value, every thread of every rank accumulates
// S = sum (x - K) and Q = sum (x - K)^2, one reduction gives both, and
//   mean = K + S / n,   var = Q / n - (S / n)^2.
// The cancellation of E[x^2] - E[x]^2 is now between Q / n = var + (mean - K)^2 and (mean - K)^2: it
// costs bits in proportion to (mean - K)^2 / var, which is about 1 for K drawn from the row (and at
// most n when x_0 is the row's worst outlier), instead of mean^2 / var (1e8 for mean 1e4, std 1).
// x - K is exact (Sterbenz) whenever x and K are within a factor 2 of each other.
// [[snippet: shifted_stats]]
template <int TPR, int CLUSTER, int VEC, int NC>
__device__ __forceinline__ void shifted_stats(const uint4 (&q)[NC], float shift, int col0, int n,
                                              float (*red_f)[33], float& mean, float& var) {
    float acc_s[2] = {0.f, 0.f}, acc_q[2] = {0.f, 0.f};
#pragma unroll
    for (int j = 0; j < NC; ++j) {
        if (col0 + j * TPR * VEC < n) {
            float v[VEC];
            unpack_raw(q[j], v);
#pragma unroll
            for (int k = 0; k < VEC; ++k) {
                const float d = v[k] - shift;
                acc_s[k & 1] += d;
                acc_q[k & 1] = fmaf(d, d, acc_q[k & 1]);
            }
        }
    }
    const float2 t = row_sum2<TPR, CLUSTER>(make_float2(acc_s[0] + acc_s[1], acc_q[0] + acc_q[1]), red_f);
    const float dm = t.x / n;                         // mean - K
    mean = shift + dm;
    var = fmaxf(t.y / n - dm * dm, 0.f);
}
// [[/snippet]]

// One output chunk from raw chunks of x, w (and b): (x - mean) * rstd * w (+ b), packed back to T.
template <bool LN, int VEC>
__device__ __forceinline__ uint4 norm_chunk(const uint4& qx, const uint4& qw, const uint4& qb, float mean,
                                            float rstd) {
    float v[VEC], fw[VEC], fb[VEC], o[VEC];
    unpack_raw(qx, v);
    unpack_raw(qw, fw);
    if constexpr (LN) unpack_raw(qb, fb);
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
        o[k] = (v[k] - mean) * rstd * fw[k];
        if constexpr (LN) o[k] += fb[k];
    }
    return pack_raw(o);
}

// [[snippet: norm_rows_raw]]
template <int STATS, typename T, int VEC, int TPR, int THREADS, int ITEMS, int CLUSTER>
__device__ __forceinline__ void norm_rows_raw(const T* __restrict__ x, const T* __restrict__ w,
                                              const T* __restrict__ b, T* __restrict__ y, int rows, int n,
                                              float eps) {
    static_assert(VEC * sizeof(T) == 16, "raw chunks are 16 bytes");
    static_assert(STATS == TWOPASS_ILP || STATS == SHIFTED || STATS == RMS_ILP, "raw statistics");
    constexpr bool LN = STATS != RMS_ILP;
    constexpr int NC = ITEMS / VEC;
    // v6 loads w and b one chunk at a time: 8 registers, as RMSNorm's two chunks of w, so that it fits
    // RMSNorm's budget (with two chunks of each ptxas spills at that budget)
    constexpr int WG = STATS == SHIFTED ? (NC < 1 ? NC : 1) : raw_weight_group<NC>();
    constexpr int NG = (NC + WG - 1) / WG;
    __shared__ float red_f[2][33];
    __shared__ Welford red_w[33];
    const RowSlice rs = row_slice<VEC, TPR, THREADS, ITEMS, CLUSTER>(n);
    if (rs.row >= rows) return;          // whole warps only: blocks and clusters never take this path
    const int rank = rs.rank;
    const size_t base = rs.base;
    auto col_of = [&](int j) { return rs.col0 + j * TPR * VEC; };

    uint4 q[NC];                         // [NC] raw 16-byte chunks of x
#pragma unroll
    for (int j = 0; j < NC; ++j)
        q[j] = col_of(j) < n ? __ldg(reinterpret_cast<const uint4*>(x + base + col_of(j))) : make_uint4(0, 0, 0, 0);

    // Weight group g: chunks [g * WG, g * WG + WG); a chunk past the end reads column 0 (never used).
    uint4 qw[WG], qb[WG];
    auto load_weights = [&](int g) {
#pragma unroll
        for (int i = 0; i < WG; ++i) {
            const int c = col_of(g * WG + i) < n ? col_of(g * WG + i) : 0;
            qw[i] = __ldg(reinterpret_cast<const uint4*>(w + c));
            if constexpr (LN) qb[i] = __ldg(reinterpret_cast<const uint4*>(b + c));
        }
    };
    load_weights(0);                     // in flight through the reduction

    float mean = 0.f, rstd;
    if constexpr (STATS == SHIFTED) {
        float var;
        shifted_stats<TPR, CLUSTER, VEC, NC>(q, to_f32(x[base]), rs.col0, n, red_f, mean, var);
        rstd = rsqrtf(var + eps);
    } else if constexpr (LN) {
        const int n_block = min(max(n - rank * TPR * ITEMS, 0), TPR * ITEMS);
        const float s = row_sum<TPR, 1>(raw_sum<false, VEC, NC>(q), red_f[0]);
        const float mean_b = n_block > 0 ? s / n_block : 0.f;
        float acc[2] = {0.f, 0.f};
#pragma unroll
        for (int j = 0; j < NC; ++j) {
            if (col_of(j) < n) {
                float v[VEC];
                unpack_raw(q[j], v);
#pragma unroll
                for (int k = 0; k < VEC; ++k) {
                    const float d = v[k] - mean_b;
                    acc[k & 1] = fmaf(d, d, acc[k & 1]);
                }
            }
        }
        float var;
        row_stats<CLUSTER>(n_block, mean_b, row_sum<TPR, 1>(acc[0] + acc[1], red_f[1]), red_w, mean, var);
        rstd = rsqrtf(var + eps);
    } else {
        rstd = rsqrtf(row_sum<TPR, CLUSTER>(raw_sum<true, VEC, NC>(q), red_f[0]) / n + eps);
    }

#pragma unroll
    for (int g = 0; g < NG; ++g) {
        if (g > 0) load_weights(g);
#pragma unroll
        for (int i = 0; i < WG; ++i) {
            const int j = g * WG + i;
            if (j < NC && col_of(j) < n) {
                *reinterpret_cast<uint4*>(y + base + col_of(j)) = norm_chunk<LN, VEC>(q[j], qw[i], qb[i], mean, rstd);
            }
        }
    }
    if constexpr (CLUSTER > 1) cluster_sync();   // keep our smem alive for the others' reads
}
// [[/snippet]]
// [[/snippet]]
