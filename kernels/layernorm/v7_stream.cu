// v7_stream.cu: layernorm_v7_stream and rmsnorm_v5_stream: a persistent, double-buffered stream of rows
// (chapter 6's softmax_v9 pipeline): as many clusters as fit at once, each CTA a fixed slice of every row
// copied into one of two smem buffers with cp.async while the other is reduced and written; exact
// per-CTA two-pass statistics from smem, Chan's merge over the cluster. Needs clusters (sm_90): the host
// side declares requires=("clusters",) for this file.
// Template parameters: T, NC (16-byte chunks per thread per buffer), THREADS, CL (CTAs per cluster).
#include "raw.cuh"

// [[snippet: norm_stream]]
// layernorm_v7_stream / rmsnorm_v5_stream: chapter 6's softmax_v9 pipeline with the norms' statistics.
// A persistent grid of clusters of CL CTAs; cluster c walks rows c, c + G, ... (G clusters); each CTA
// owns the same slice of NC x THREADS 16-byte chunks of every row and double-buffers it in shared
// memory: the cp.async copies of the next row's slice land in one buffer while the current row is
// reduced and written from the other (row_stream.cuh), so HBM reads never pause for a barrier or a
// write phase, as they do wave after wave in v5 / v6 (one cluster per row, row in registers).
// Since the slice's columns are the same for every row, w (and b) of the slice are loaded once into
// registers before the loop: weight traffic is one read per CTA, not one per row.
// Statistics, with the row in shared memory (a re-read costs ~1 cycle per 128 bytes, not DRAM):
//   RMSNorm:   the sum of squares; block sum, then the CL partial sums over DSMEM.
//   LayerNorm: exact per CTA in two passes over the slice (the slice's mean, then the sum of squared
//              deviations from it), then Chan's merge of the CL states (n, mean, M2) over DSMEM. No
//              E[x^2] - E[x]^2 anywhere: a mean of 1e4 costs no bits beyond fp32's own.
// One cluster barrier per row: each CTA publishes its partial in a parity slot (row r in slot r's
// parity); a slot is rewritten two rows later, after every CTA has passed the next row's barrier.
template <bool LN, typename T, int NC, int THREADS, int CL>
__device__ __forceinline__ void norm_stream(const T* __restrict__ x, const T* __restrict__ w,
                                            const T* __restrict__ b, T* __restrict__ y, int rows, int n,
                                            float eps) {
    using Slice = RowSlice16<T, NC, THREADS>;
    constexpr int VEC = Slice::VEC;
    constexpr int WARPS = THREADS / 32;
    extern __shared__ uint4 slice_buf[];        // [2, NC * THREADS] chunks: the double buffer
    __shared__ float red_s[WARPS], red_q[WARPS];  // block sums (separate buffers: no barrier between)
    __shared__ Welford slot_w[2];               // LayerNorm: the CTA's (n, mean, M2), by row parity
    __shared__ float slot_f[2];                 // RMSNorm: the CTA's sum of squares, by row parity
    cg::cluster_group cluster = cg::this_cluster();
    const int rank = CL > 1 ? (int)cluster.block_rank() : 0;
    const int n_clusters = gridDim.x / CL;
    const int first = rank * Slice::CHUNKS;
    const bool vec_ok = n % VEC == 0;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    // values of the row in this CTA's slice (0 for the later ranks of a short row)
    const int n_cta = min(max(n - first * VEC, 0), Slice::CHUNKS * VEC);

    auto block_sum = [&](float v, float* red) {   // every thread gets the block's sum; one barrier
        v = warp_sum(v);
        if (WARPS == 1) return v;
        if (lane == 0) red[warp] = v;
        __syncthreads();
        return warp_sum(lane < WARPS ? red[lane] : 0.f);
    };

    int r = blockIdx.x / CL;
    Slice::issue(slice_buf, x + (size_t)r * n, first, n, vec_ok, 0u, r >= rows);   // pad: 0.0

    uint4 qw[NC], qb[NC];                       // [NC] raw chunks of w and b for this slice, all rows
#pragma unroll
    for (int j = 0; j < NC; ++j) {
        const int e0 = Slice::col(first, j);
        qw[j] = vec_ok && e0 < n ? __ldg(reinterpret_cast<const uint4*>(w + e0)) : gather_chunk(w, e0, n, 0u);
        if constexpr (LN) qb[j] = vec_ok && e0 < n ? __ldg(reinterpret_cast<const uint4*>(b + e0)) : gather_chunk(b, e0, n, 0u);
    }

    int p = 0;
    for (; r < rows; r += n_clusters, p ^= 1) {
        const uint4* buf = slice_buf + p * Slice::CHUNKS;
        const int r_next = r + n_clusters;
        Slice::issue(slice_buf + (p ^ 1) * Slice::CHUNKS, x + (size_t)r_next * n, first, n, vec_ok, 0u,
                     r_next >= rows);
        cp_async_wait<1>();                     // this thread's copies of row r have landed

        float mean = 0.f, rstd;
        if constexpr (LN) {
            float acc[2] = {0.f, 0.f};          // pass 1: the slice's sum (pad values are 0.0)
#pragma unroll
            for (int j = 0; j < NC; ++j) {
                float v[VEC];
                unpack_raw(Slice::get(buf, j), v);
#pragma unroll
                for (int k = 0; k < VEC; ++k) acc[k & 1] += v[k];
            }
            const float mean_b = n_cta > 0 ? block_sum(acc[0] + acc[1], red_s) / n_cta : 0.f;
            acc[0] = acc[1] = 0.f;              // pass 2: squared deviations from the slice's mean
#pragma unroll
            for (int j = 0; j < NC; ++j) {
                float v[VEC];
                unpack_raw(Slice::get(buf, j), v);
                const int e0 = Slice::col(first, j);
#pragma unroll
                for (int k = 0; k < VEC; ++k) {
                    const float d = e0 + k < n ? v[k] - mean_b : 0.f;
                    acc[k & 1] = fmaf(d, d, acc[k & 1]);
                }
            }
            const float m2_b = block_sum(acc[0] + acc[1], red_q);
            Welford st{(float)n_cta, mean_b, m2_b};
            if constexpr (CL > 1) {
                if (threadIdx.x == 0) slot_w[p] = st;
                cluster.sync();
                st = lane < CL ? *cluster.map_shared_rank(&slot_w[p], lane) : Welford{0.f, 0.f, 0.f};
                st = warp_welford(st);          // every warp merges the same states in the same order
            }
            mean = st.mean;
            rstd = rsqrtf(fmaxf(st.m2 / n, 0.f) + eps);
        } else {
            float acc[2] = {0.f, 0.f};
#pragma unroll
            for (int j = 0; j < NC; ++j) {
                float v[VEC];
                unpack_raw(Slice::get(buf, j), v);
#pragma unroll
                for (int k = 0; k < VEC; ++k) acc[k & 1] = fmaf(v[k], v[k], acc[k & 1]);
            }
            float ss = block_sum(acc[0] + acc[1], red_s);
            if constexpr (CL > 1) {
                if (threadIdx.x == 0) slot_f[p] = ss;
                cluster.sync();
                ss = warp_sum(lane < CL ? *cluster.map_shared_rank(&slot_f[p], lane) : 0.f);
            }
            rstd = rsqrtf(ss / n + eps);
        }
        if constexpr (CL == 1) __syncthreads();  // red_s / red_q are rewritten by the next row

        T* y_row = y + (size_t)r * n;
#pragma unroll
        for (int j = 0; j < NC; ++j) {
            const int e0 = Slice::col(first, j);
            if (e0 < n) {
                scatter_chunk(y_row, e0, n, vec_ok, norm_chunk<LN, VEC>(Slice::get(buf, j), qw[j], qb[j], mean, rstd));
            }
        }
    }
    cp_async_wait<0>();                         // no copy may land after the CTA has exited
    if constexpr (CL > 1) cluster.sync();       // keep our slots alive until the cluster's last reads
}
// [[/snippet]]

// [[snippet: layernorm_v7]]
template <typename T, int NC, int THREADS, int CL>
__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(THREADS, (stream_min_blocks<NC, THREADS, 8 * NC>()))
layernorm_v7_stream(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                    T* __restrict__ y, int rows, int n, float eps) {
    norm_stream<true, T, NC, THREADS, CL>(x, w, b, y, rows, n, eps);
}
// [[/snippet]]

// [[snippet: rmsnorm_v5]]
template <typename T, int NC, int THREADS, int CL>
__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(THREADS, (stream_min_blocks<NC, THREADS, 4 * NC>()))
rmsnorm_v5_stream(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y, int rows, int n,
                  float eps) {
    norm_stream<false, T, NC, THREADS, CL>(x, w, nullptr, y, rows, n, eps);
}
// [[/snippet]]
