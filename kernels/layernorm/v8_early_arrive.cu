// v8_early_arrive.cu: layernorm_v8_early_arrive and rmsnorm_v6_early_arrive: layernorm_v6 / rmsnorm_v4 with
// the exit cluster barrier split: a relaxed arrive right after the row's DSMEM reads, the stores, then the
// wait before exit. Own copies of the reduction, the shifted statistics and the raw rows (raw.cuh stays
// as v5 / v6 display it); the chapter shows them as diffs against those. Cluster layouts only: the host
// side declares requires=("clusters",) for this file.
#include "raw.cuh"

// [[snippet: row_sum_early]]
// row_sum / row_sum2 (norm_common.cuh) for the row's one cluster reduction, with the arrive of the split
// exit barrier: each thread arrives (relaxed) at the exit barrier once its DSMEM reads (acquire loads)
// have returned, and waits before it exits (norm_rows_raw_early).
template <int TPR, int CLUSTER>
__device__ __forceinline__ float row_sum_early(float v, float* red) {
    v = warp_sum(v);
    const int lane = threadIdx.x & 31;
    if constexpr (TPR > 32) {
        if (lane == 0) red[threadIdx.x >> 5] = v;
        __syncthreads();
        v = warp_sum(lane < TPR / 32 ? red[lane] : 0.f);
    }
    cg::cluster_group cluster = cg::this_cluster();
    if (threadIdx.x == 0) red[32] = v;
    cluster.sync();
    // the data is back before the arrive issues (row_stream.cuh, cluster_split_barrier)
    v = warp_sum(lane < CLUSTER ? ld_acquire_cluster(cluster.map_shared_rank(&red[32], lane)) : 0.f);
    cluster_arrive_relaxed();
    return v;
}

template <int TPR, int CLUSTER>
__device__ __forceinline__ float2 row_sum2_early(float2 v, float (*red)[33]) {
    v.x = warp_sum(v.x);
    v.y = warp_sum(v.y);
    const int lane = threadIdx.x & 31;
    if constexpr (TPR > 32) {
        if (lane == 0) { red[0][threadIdx.x >> 5] = v.x; red[1][threadIdx.x >> 5] = v.y; }
        __syncthreads();
        v.x = warp_sum(lane < TPR / 32 ? red[0][lane] : 0.f);
        v.y = warp_sum(lane < TPR / 32 ? red[1][lane] : 0.f);
    }
    cg::cluster_group cluster = cg::this_cluster();
    if (threadIdx.x == 0) { red[0][32] = v.x; red[1][32] = v.y; }
    cluster.sync();
    v.x = warp_sum(lane < CLUSTER ? ld_acquire_cluster(cluster.map_shared_rank(&red[0][32], lane)) : 0.f);
    v.y = warp_sum(lane < CLUSTER ? ld_acquire_cluster(cluster.map_shared_rank(&red[1][32], lane)) : 0.f);
    cluster_arrive_relaxed();
    return v;
}
// [[/snippet]]

// [[snippet: shifted_stats_early]]
template <int TPR, int CLUSTER, int VEC, int NC>
__device__ __forceinline__ void shifted_stats_early(const uint4 (&q)[NC], float shift, int col0, int n,
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
    const float2 t = row_sum2_early<TPR, CLUSTER>(make_float2(acc_s[0] + acc_s[1], acc_q[0] + acc_q[1]), red_f);
    const float dm = t.x / n;                         // mean - K
    mean = shift + dm;
    var = fmaxf(t.y / n - dm * dm, 0.f);
}
// [[/snippet]]

// [[snippet: norm_rows_raw_early]]
template <int STATS, typename T, int VEC, int TPR, int THREADS, int ITEMS, int CLUSTER>
__device__ __forceinline__ void norm_rows_raw_early(const T* __restrict__ x, const T* __restrict__ w,
                                              const T* __restrict__ b, T* __restrict__ y, int rows, int n,
                                              float eps) {
    static_assert(VEC * sizeof(T) == 16, "raw chunks are 16 bytes");
    static_assert(STATS == SHIFTED || STATS == RMS_ILP, "early arrive: one cluster reduction per row");
    static_assert(CLUSTER > 1, "early arrive splits the exit cluster barrier");
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
        shifted_stats_early<TPR, CLUSTER, VEC, NC>(q, to_f32(x[base]), rs.col0, n, red_f, mean, var);
        rstd = rsqrtf(var + eps);
    } else {
        rstd = rsqrtf(row_sum_early<TPR, CLUSTER>(raw_sum<true, VEC, NC>(q), red_f[0]) / n + eps);
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
    cluster_wait();                      // arrived in row_sum_early / row_sum2_early already
}
// [[/snippet]]

// [[snippet: layernorm_v8]]
// layernorm_v8_early_arrive / rmsnorm_v6_early_arrive: layernorm_v6 / rmsnorm_v4 with the exit cluster
// barrier split. Nsight Compute on the H200 (2026-11-29) put 15.5% of rmsnorm_v4's stall cycles per
// issued instruction on membar at fp32 128 x 262144 (23.5% at bf16 1024 x 65536), 13-16% for
// layernorm_v6, all at the ERRBAR (the wait for outstanding stores to be acknowledged) of norm_rows_raw's last cluster_sync(): it comes after the stores, and
// a cluster barrier's arrive has release semantics, so every thread waits there until its stores are
// acknowledged and the CTA keeps its SM slot from the next cluster until then. That barrier only keeps
// red[32] alive for the peers' DSMEM reads of the row's one cluster reduction, so here every thread
// arrives (relaxed: no fence) right after its own DSMEM reads, in row_sum_early / row_sum2_early, and waits for the
// others' arrivals just before it exits (cluster_arrive_relaxed / cluster_wait, row_stream.cuh). The
// reads are acquire loads, so that the arrive cannot issue before their data is back.
// Same arithmetic and register budget as v6 / v4; instantiated on the cluster layouts only (EARLY_LAYOUTS).
template <typename T, int VEC, int TPR, int THREADS, int ITEMS, int CLUSTER>
__global__ void __launch_bounds__(THREADS, raw_blocks_per_sm<ITEMS / VEC, THREADS, CLUSTER == 1, CLUSTER>()) __cluster_dims__(CLUSTER, 1, 1)
layernorm_v8_early_arrive(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                          T* __restrict__ y, int rows, int n, float eps) {
    norm_rows_raw_early<SHIFTED, T, VEC, TPR, THREADS, ITEMS, CLUSTER>(x, w, b, y, rows, n, eps);
}
// [[/snippet]]

// [[snippet: rmsnorm_v6]]
template <typename T, int VEC, int TPR, int THREADS, int ITEMS, int CLUSTER>
__global__ void __launch_bounds__(THREADS, raw_blocks_per_sm<ITEMS / VEC, THREADS, false, CLUSTER>()) __cluster_dims__(CLUSTER, 1, 1)
rmsnorm_v6_early_arrive(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y, int rows, int n,
                        float eps) {
    norm_rows_raw_early<RMS_ILP, T, VEC, TPR, THREADS, ITEMS, CLUSTER>(x, w, nullptr, y, rows, n, eps);
}
// [[/snippet]]
