// rows.cuh: the row-in-registers machinery of versions 1-3 (LayerNorm v1-v3, RMSNorm v1-v2). A row is
// spread over TPR threads (a warp, a block, or a cluster of blocks), each holding ITEMS values in
// registers between the one read and the one write; STATS picks the statistics a version computes.
#pragma once
#include "norm_common.cuh"

// [[snippet: norm_rows]]
enum Stats { TWOPASS = 0, WELFORD = 1, RMS = 2 };

// One row per TPR threads; the row's values live in v[ITEMS] (fp32) between the read and the write.
// With RowSlice's index map a warp's accesses are contiguous (coalesced) and a thread's valid
// columns are a prefix of j.
template <int STATS, typename T, int VEC, int TPR, int THREADS, int ITEMS, int CLUSTER>
__device__ __forceinline__ void norm_rows(const T* __restrict__ x, const T* __restrict__ w,
                                          const T* __restrict__ b, T* __restrict__ y, int rows, int n,
                                          float eps) {
    constexpr int NV = ITEMS / VEC;
    __shared__ float red_f[2][33];       // two sums (mean, then deviations) for TWOPASS / one for RMS
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
    if constexpr (STATS == TWOPASS) {
        float s = 0.f;
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) s += v[i];              // invalid slots hold 0
        mean = row_sum<TPR, CLUSTER>(s, red_f[0]) / n;
        float d2 = 0.f;
#pragma unroll
        for (int j = 0; j < NV; ++j) {
            if (col0 + j * TPR * VEC < n) {
#pragma unroll
                for (int k = 0; k < VEC; ++k) {
                    const float d = v[j * VEC + k] - mean;
                    d2 = fmaf(d, d, d2);
                }
            }
        }
        rstd = rsqrtf(row_sum<TPR, CLUSTER>(d2, red_f[1]) / n + eps);
    } else if constexpr (STATS == WELFORD) {
        Welford s{0.f, 0.f, 0.f};
#pragma unroll
        for (int j = 0; j < NV; ++j) {
            if (col0 + j * TPR * VEC < n) {      // valid accesses are a prefix of j, so the count
#pragma unroll                               // after value i is i + 1 and 1 / n is a constant
                for (int k = 0; k < VEC; ++k) welford_push(s, v[j * VEC + k], 1.f / (j * VEC + k + 1));
            }
        }
        s = row_welford<TPR, CLUSTER>(s, red_w);
        mean = s.mean;
        rstd = rsqrtf(s.m2 / s.n + eps);
    } else {
        float ss = 0.f;
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) ss = fmaf(v[i], v[i], ss);
        rstd = rsqrtf(row_sum<TPR, CLUSTER>(ss, red_f[0]) / n + eps);
    }

#pragma unroll
    for (int j = 0; j < NV; ++j) {
        const int col = col0 + j * TPR * VEC;
        if (col < n) {
            const Pack<T, VEC> pw = *reinterpret_cast<const Pack<T, VEC>*>(w + col);
            Pack<T, VEC> pb, out;
            if constexpr (STATS != RMS) pb = *reinterpret_cast<const Pack<T, VEC>*>(b + col);
#pragma unroll
            for (int k = 0; k < VEC; ++k) {
                float o = (v[j * VEC + k] - mean) * rstd * to_f32(pw.v[k]);
                if constexpr (STATS != RMS) o += to_f32(pb.v[k]);
                out.v[k] = from_f32<T>(o);
            }
            *reinterpret_cast<Pack<T, VEC>*>(y + base + col) = out;
        }
    }
    if constexpr (CLUSTER > 1) cluster_sync();   // keep our smem alive for the others' reads
}
// [[/snippet]]
