// ilp.cuh: the statistics of LayerNorm v4 / RMSNorm v3 (exact two-pass from the registers with independent
// accumulators; Chan's merge over a cluster), and v4's copy of the row machinery (norm_rows_ilp: norm_rows of
// rows.cuh with these statistics). raw.cuh (v5, v6) builds on the same statistics.
#pragma once
#include "rows.cuh"

enum StatsIlp { TWOPASS_ILP = 3, RMS_ILP = 4, SHIFTED = 5 };

// [[snippet: ilp_stats]]
// Exact two-pass statistics of the values this block holds, with four independent accumulators
// (slot k & 3 is fixed at compile time, so four add/FMA chains run side by side instead of one),
// then, for a cluster, Chan's merge of the blocks' exact (n, mean, M2): merging partitions is where
// Welford's algebra belongs; inside a block the row is in registers, so a second sweep is free of
// bytes. `col0` is this thread's first column, `n_block` the number of valid columns of this block.
// Sum of NACC partial sums, in a fixed order.
template <int NACC>
__device__ __forceinline__ float acc_total(const float (&acc)[NACC]) {
    float t = 0.f;
#pragma unroll
    for (int a = 0; a < NACC; ++a) t += acc[a];
    return t;
}

// The row's mean and M2 / n from this block's exact (n_block, mean_b, M2_b): as they are for a block
// that holds the whole row, merged over the cluster's blocks with Chan's formula otherwise.
template <int CLUSTER>
__device__ __forceinline__ void row_stats(int n_block, float mean_b, float m2_b, Welford* red_w /* [33] */,
                                          float& mean, float& m2_over_n) {
#if NORM_HAS_CLUSTERS
    if constexpr (CLUSTER > 1) {
        const Welford st = cluster_welford<CLUSTER>(Welford{(float)n_block, mean_b, m2_b}, &red_w[32]);
        mean = st.mean;
        m2_over_n = st.m2 / st.n;
        return;
    }
#endif
    {
        mean = mean_b;
        m2_over_n = m2_b / n_block;
    }
}

template <int TPR, int CLUSTER, int VEC, int NV, int NACC>
__device__ __forceinline__ void twopass_ilp(const float (&v)[NV * VEC], int col0, int n, int n_block,
                                            float (*red_f)[33], Welford* red_w, float& mean,
                                            float& m2_over_n) {
    float acc[NACC] = {};
#pragma unroll
    for (int i = 0; i < NV * VEC; ++i) acc[i % NACC] += v[i];          // invalid slots hold 0
    const float s = row_sum<TPR, 1>(acc_total<NACC>(acc), red_f[0]);
    const float mean_b = n_block > 0 ? s / n_block : 0.f;           // an empty rank: n = 0, M2 = 0
    #pragma unroll
    for (int a = 0; a < NACC; ++a) acc[a] = 0.f;
#pragma unroll
    for (int j = 0; j < NV; ++j) {
        if (col0 + j * TPR * VEC < n) {
#pragma unroll
            for (int k = 0; k < VEC; ++k) {
                const float d = v[j * VEC + k] - mean_b;
                acc[k % NACC] = fmaf(d, d, acc[k % NACC]);
            }
        }
    }
    const float m2_b = row_sum<TPR, 1>(acc_total<NACC>(acc), red_f[1]);
    row_stats<CLUSTER>(n_block, mean_b, m2_b, red_w, mean, m2_over_n);
}

// Sum of squares with four independent accumulators (RMSNorm), reduced over the row.
template <int TPR, int CLUSTER, int ITEMS>
__device__ __forceinline__ float sumsq_ilp(const float (&v)[ITEMS], float* red) {
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) acc[i & 3] = fmaf(v[i], v[i], acc[i & 3]);
    return row_sum<TPR, CLUSTER>((acc[0] + acc[1]) + (acc[2] + acc[3]), red);
}
// [[/snippet]]

// [[snippet: norm_rows_ilp]]
// One row per TPR threads; the row's values live in v[ITEMS] (fp32) between the read and the write.
// With RowSlice's index map a warp's accesses are contiguous (coalesced) and a thread's valid
// columns are a prefix of j.
template <int STATS, typename T, int VEC, int TPR, int THREADS, int ITEMS, int CLUSTER>
__device__ __forceinline__ void norm_rows_ilp(const T* __restrict__ x, const T* __restrict__ w,
                                          const T* __restrict__ b, T* __restrict__ y, int rows, int n,
                                          float eps) {
    constexpr int NV = ITEMS / VEC;
    __shared__ float red_f[2][33];       // two sums (mean, then deviations) / one for RMS_ILP
    __shared__ Welford red_w[33];        // warp states [32] + the block's state for the cluster [1]
    const RowSlice rs = row_slice<VEC, TPR, THREADS, ITEMS, CLUSTER>(n);
    if (rs.row >= rows) return;          // whole warps only: blocks and clusters never take this path
    const int rank = rs.rank, col0 = rs.col0;
    const size_t base = rs.base;

    float v[ITEMS];                      // [NV, VEC] values of this thread, fp32
#pragma unroll
    for (int j = 0; j < NV; ++j) {
        const int col = col0 + j * TPR * VEC;
        Pack<T, VEC> p;
        if (col < n) p = *reinterpret_cast<const Pack<T, VEC>*>(x + base + col);
#pragma unroll
        for (int k = 0; k < VEC; ++k) v[j * VEC + k] = col < n ? to_f32(p.v[k]) : 0.f;
    }

    float mean = 0.f, rstd;
    if constexpr (STATS == TWOPASS_ILP) {
        const int n_block = min(max(n - rank * TPR * ITEMS, 0), TPR * ITEMS);
        float var;
        constexpr int NACC = ITEMS >= 32 ? 2 : 4;   // 4 chains spill the 64-register budget at 32 values
        twopass_ilp<TPR, CLUSTER, VEC, NV, NACC>(v, col0, n, n_block, red_f, red_w, mean, var);
        rstd = rsqrtf(var + eps);
    } else {
        rstd = rsqrtf(sumsq_ilp<TPR, CLUSTER, ITEMS>(v, red_f[0]) / n + eps);
    }

#pragma unroll
    for (int j = 0; j < NV; ++j) {
        const int col = col0 + j * TPR * VEC;
        if (col < n) {
            const Pack<T, VEC> pw = *reinterpret_cast<const Pack<T, VEC>*>(w + col);
            Pack<T, VEC> pb, out;
            if constexpr (STATS != RMS_ILP) pb = *reinterpret_cast<const Pack<T, VEC>*>(b + col);
#pragma unroll
            for (int k = 0; k < VEC; ++k) {
                float o = (v[j * VEC + k] - mean) * rstd * to_f32(pw.v[k]);
                if constexpr (STATS != RMS_ILP) o += to_f32(pb.v[k]);
                out.v[k] = from_f32<T>(o);
            }
            *reinterpret_cast<Pack<T, VEC>*>(y + base + col) = out;
        }
    }
    if constexpr (CLUSTER > 1) cluster_sync();   // keep our smem alive for the others' reads
}
// [[/snippet]]
