// v09_stream.cu (chapter 6): against v6, a persistent, double-buffered stream: as many clusters as fit
// at once, each walking rows c, c + G, ...; every CTA owns a fixed slice of every row and copies the next
// row's slice into a second shared-memory buffer (cp.async) while it reduces and writes the current one.
// Hopper only (clusters).
#include <cooperative_groups.h>

#include "raw.cuh"

namespace cg = cooperative_groups;

// [[snippet: softmax_v9]]
// v9: a persistent, double-buffered cluster per row. v6 launches one cluster per row, holds the row in
// registers and runs read -> cluster barrier -> write; every CTA of a wave does the same at the same
// time, so each of the ~8 waves pays a DRAM read ramp, a barrier and a write ramp with HBM half idle
// (ncu: 47-68% of DRAM peak at 262144). Here the grid is only as many clusters of CL CTAs as fit on the
// GPU at once (one or two CTAs per SM), and cluster c walks rows c, c + G, c + 2G, ... (G clusters).
// A CTA owns the same slice (NC x THREADS chunks) of every row it touches and keeps TWO copies of that
// slice in shared memory: while it reduces and writes row r from buffer b, the cp.async copies of row
// r + G are already landing in buffer b ^ 1. Reads never stop for the barrier or the writes, and every
// SM has a whole slice (32-64 KiB) of reads in flight, above the ~35 KiB per SM that Little's law asks
// at 4.3 TB/s and ~1 us of latency.
// Per row: the thread's (m, l) over its chunks in smem, the block merge (one __syncthreads), the
// block's state into a parity slot, ONE cluster barrier, every warp merges the CL slots over DSMEM (the
// same order everywhere: the same bits), then y = e^{x - m} / l from smem with streaming stores. The
// parity slots make one barrier per row enough: a slot is rewritten two rows later, after every CTA of
// the cluster has passed the next row's barrier, hence finished reading it.
template <typename T, int NC, int THREADS, int CL>
__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(THREADS, (stream_min_blocks<NC, THREADS>()))
softmax_v9_stream(const T* __restrict__ x, T* __restrict__ y, int rows, int cols) {
    using Slice = RowSlice16<T, NC, THREADS>;
    constexpr int VEC = Slice::VEC;
    constexpr unsigned PAD = sizeof(T) == 4 ? 0xff800000u : 0xff80u;   // -inf: weight 0
    extern __shared__ uint4 slice_buf[];        // [2, NC * THREADS] chunks: the double buffer
    __shared__ SoftmaxState scratch[THREADS / 32];
    __shared__ SoftmaxState block_state[2];     // parity slots, read by the whole cluster
    cg::cluster_group cluster = cg::this_cluster();
    const int rank = CL > 1 ? (int)cluster.block_rank() : 0;
    const int n_clusters = gridDim.x / CL;
    const int first = rank * Slice::CHUNKS;     // this CTA's first chunk of every row
    const bool vec_ok = cols % VEC == 0;
    const int lane = threadIdx.x % 32;

    int r = blockIdx.x / CL;                    // this cluster's first row
    Slice::issue(slice_buf, x + (size_t)r * cols, first, cols, vec_ok, PAD, r >= rows);
    int p = 0;                                  // buffer and slot parity of row r
    for (; r < rows; r += n_clusters, p ^= 1) {
        const uint4* buf = slice_buf + p * Slice::CHUNKS;
        const int r_next = r + n_clusters;      // prefetch: the next row into the other buffer
        Slice::issue(slice_buf + (p ^ 1) * Slice::CHUNKS, x + (size_t)r_next * cols, first, cols, vec_ok, PAD,
                     r_next >= rows);
        cp_async_wait<1>();                     // this thread's copies of row r have landed

        uint4 q[NC];                            // [NC] raw chunks of this thread, from smem
#pragma unroll
        for (int j = 0; j < NC; ++j) q[j] = Slice::get(buf, j);
        const SoftmaxState bs = softmax_block_merge<THREADS>(softmax_chunks_state<T, NC>(q), scratch);
        SoftmaxState row_state = bs;
        if constexpr (CL > 1) {
            if (threadIdx.x == 0) block_state[p] = bs;
            cluster.sync();                     // every CTA's state of row r is published
            SoftmaxState s = softmax_state_empty();
            if (lane < CL) s = *cluster.map_shared_rank(&block_state[p], lane);   // DSMEM read
            row_state = softmax_warp_merge(s);
        } else {
            __syncthreads();                    // scratch is rewritten by the next row's merge
        }

        const float m_safe = softmax_safe_max(row_state.m);
        const float inv_l = softmax_inv_sum(row_state);   // fully masked row: NaN, as torch
        T* y_row = y + (size_t)r * cols;
#pragma unroll
        for (int j = 0; j < NC; ++j) {
            float v[VEC];
            unpack(Slice::get(buf, j), v);
#pragma unroll
            for (int k = 0; k < VEC; ++k) v[k] = softmax_exp(v[k], m_safe) * inv_l;
            const int e0 = Slice::col(first, j);
            if (e0 < cols) scatter_chunk(y_row, e0, cols, vec_ok, pack_raw(v));
        }
    }
    cp_async_wait<0>();                         // no copy may land after the CTA has exited
    if constexpr (CL > 1) cluster.sync();       // keep our slots alive until the cluster's last reads
}
// [[/snippet]]
