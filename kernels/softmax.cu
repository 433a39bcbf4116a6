// softmax.cu: y = softmax(x) over the last dim of a rows x cols matrix, fp32 or bf16 I/O (bf16 is
// read and written as bf16, all arithmetic in fp32). Every version reads x and writes y in 16-byte
// chunks (4 floats or 8 bf16) where the row allows it (cols a multiple of the chunk), element by
// element otherwise. Versions, each against the one before:
//
//   v0_three_pass     safe softmax as three kernels, one block per row each: row max -> m[],
//                     sum of e^{x - m} -> l[], then y = e^{x - m} / l. Reads x three times.
//   v1_online         one kernel, one block per row: the online (m, l) recurrence over the row in one
//                     read, the block's states merged, then a second read to write y. Two reads.
//   v2_warp_row       one warp per row, the whole row held in registers: one read, a warp-level
//                     (m, l) merge, one write. Rows up to 32 x 8 chunks (1024 fp32, 2048 bf16).
//   v3_block_row      one block per row, the row held in the registers of up to 1024 threads
//                     (16 elements each): one read, a block-level merge. Rows up to 16384.
//   v4_cluster_row    a cluster of 2..8 blocks per row, each holding a contiguous slice in registers;
//                     the blocks' (m, l) states merged through distributed shared memory (DSMEM).
//                     One read, for rows up to 8 x 1024 x 32 = 262144.
//   v5_block_raw      v3 keeping each 16-byte chunk raw (4 registers for 4 fp32 or 8 bf16) and
//                     recomputing e^{x - m} at the write; block size and chunks per thread are template
//                     parameters and __launch_bounds__ asks for enough blocks per SM. bf16 rows get
//                     twice the bytes in flight per register.
//   v6_cluster_raw    v4 the same way, with 128-512-thread blocks so several clusters share an SM and
//                     one's cluster barriers overlap another's memory traffic. Cluster sizes above 8
//                     are non-portable: the launcher sets the function attribute that allows them.
//   v7_warp_raw       v2 with raw chunks and a register cap from MIN_BLOCKS: short bf16 rows at 4
//                     registers per 8 elements, so every row of a small input is resident at once
//                     (one wave: all loads issued at the start, no second wave to wait for).
//   v8_warp_stream    v2 as a stream: each warp walks RPW rows (grid stride) and issues the loads of
//                     its next row before the math and stores of the current one, so reads, exp math and
//                     writes of different rows overlap instead of running as three machine-wide phases.
//   v9_stream         v6 as a persistent, double-buffered stream: as many clusters as fit at once, each
//                     walking rows c, c + G, ...; every CTA owns a fixed slice of every row and copies
//                     the next row's slice into a second shared-memory buffer (cp.async) while it
//                     reduces and writes the current one, so reads never stop at a barrier or a write.
//   v10_cluster_once  v6 with one exponential per element instead of two: the sum pass keeps
//                     e = e^{x - m_t} in the chunk registers in place of x, the write is e * e^{m_t - m} / l.
//   v11_early_arrive  v10 with its exit cluster barrier split: a relaxed arrive once the DSMEM reads are
//                     done, the stores, the wait just before exit (no release fence behind the stores).
//
// Templates are instantiated by name expression from kernels/softmax.py (softmax_v2_warp_row<float, 8>).
// The (m, l) state and its merge live in online_softmax.cuh, shared with chapter 15.
#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include "common.cuh"
#include "online_softmax.cuh"
#include "row_stream.cuh"

namespace cg = cooperative_groups;

// [[snippet: softmax_chunks]]
// A 16-byte chunk of a row as VEC floats: 4 fp32 or 8 bf16. Chunk c holds elements [c*VEC, c*VEC+VEC).
// When the row length is a multiple of VEC every row starts 16-byte aligned and a chunk is one vector
// access; otherwise (or past the end) elements go one by one, missing ones read as -inf (weight 0).
template <typename T> struct Chunk;
template <> struct Chunk<float> { static constexpr int VEC = 4; };
template <> struct Chunk<__nv_bfloat16> { static constexpr int VEC = 8; };

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ void from_float(float& d, float v) { d = v; }
__device__ __forceinline__ void from_float(__nv_bfloat16& d, float v) { d = __float2bfloat16_rn(v); }

__device__ __forceinline__ void load_vec(const float* p, float (&v)[4]) {
    const float4 q = *reinterpret_cast<const float4*>(p);
    v[0] = q.x; v[1] = q.y; v[2] = q.z; v[3] = q.w;
}
__device__ __forceinline__ void load_vec(const __nv_bfloat16* p, float (&v)[8]) {
    const uint4 q = *reinterpret_cast<const uint4*>(p);
    const unsigned w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w[k]));
        v[2 * k] = f.x; v[2 * k + 1] = f.y;
    }
}
__device__ __forceinline__ void store_vec(float* p, const float (&v)[4]) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
}
__device__ __forceinline__ void store_vec(__nv_bfloat16* p, const float (&v)[8]) {
    uint4 q;
    unsigned* w = reinterpret_cast<unsigned*>(&q);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const __nv_bfloat162 h = __floats2bfloat162_rn(v[2 * k], v[2 * k + 1]);
        w[k] = *reinterpret_cast<const unsigned*>(&h);
    }
    *reinterpret_cast<uint4*>(p) = q;
}

template <typename T>
__device__ __forceinline__ void load_chunk(const T* __restrict__ row, int c, int cols, bool vec_ok,
                                           float (&v)[Chunk<T>::VEC]) {
    constexpr int VEC = Chunk<T>::VEC;
    const int e0 = c * VEC;
    if (vec_ok && e0 < cols) {
        load_vec(row + e0, v);
    } else {
#pragma unroll
        for (int k = 0; k < VEC; ++k) v[k] = e0 + k < cols ? to_float(row[e0 + k]) : SOFTMAX_NEG_INF;
    }
}

template <typename T>
__device__ __forceinline__ void store_chunk(T* __restrict__ row, int c, int cols, bool vec_ok,
                                            const float (&v)[Chunk<T>::VEC]) {
    constexpr int VEC = Chunk<T>::VEC;
    const int e0 = c * VEC;
    if (vec_ok && e0 < cols) {
        store_vec(row + e0, v);
    } else {
#pragma unroll
        for (int k = 0; k < VEC; ++k)
            if (e0 + k < cols) from_float(row[e0 + k], v[k]);
    }
}
// [[/snippet]]

// Block-wide max / sum of one float per thread (THREADS a multiple of 32); one __syncthreads.
template <int THREADS, bool MAX>
__device__ __forceinline__ float block_reduce(float v, float* scratch /* [THREADS / 32] */) {
    constexpr int WARPS = THREADS / 32;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    v = MAX ? warp_max(v) : warp_sum(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < WARPS ? scratch[lane] : (MAX ? SOFTMAX_NEG_INF : 0.f);
    return MAX ? warp_max(v) : warp_sum(v);
}

// [[snippet: softmax_v0]]
// v0: three kernels, one block of V0_THREADS per row each, x read three times.
constexpr int V0_THREADS = 256;

template <typename T>
__global__ void __launch_bounds__(V0_THREADS)
softmax_v0_three_pass_max(const T* __restrict__ x, float* __restrict__ m_out, int cols) {
    constexpr int VEC = Chunk<T>::VEC;
    __shared__ float scratch[V0_THREADS / 32];
    const T* row = x + (size_t)blockIdx.x * cols;
    const bool vec_ok = cols % VEC == 0;
    float m = SOFTMAX_NEG_INF;
    for (int c = threadIdx.x; c * VEC < cols; c += V0_THREADS) {
        float v[VEC];
        load_chunk(row, c, cols, vec_ok, v);
#pragma unroll
        for (int k = 0; k < VEC; ++k) m = fmaxf(m, v[k]);
    }
    m = block_reduce<V0_THREADS, true>(m, scratch);
    if (threadIdx.x == 0) m_out[blockIdx.x] = m;
}

template <typename T>
__global__ void __launch_bounds__(V0_THREADS)
softmax_v0_three_pass_sum(const T* __restrict__ x, const float* __restrict__ m_in, float* __restrict__ l_out,
                          int cols) {
    constexpr int VEC = Chunk<T>::VEC;
    __shared__ float scratch[V0_THREADS / 32];
    const T* row = x + (size_t)blockIdx.x * cols;
    const bool vec_ok = cols % VEC == 0;
    const float m_safe = softmax_safe_max(m_in[blockIdx.x]);
    float l = 0.f;
    for (int c = threadIdx.x; c * VEC < cols; c += V0_THREADS) {
        float v[VEC];
        load_chunk(row, c, cols, vec_ok, v);
#pragma unroll
        for (int k = 0; k < VEC; ++k) l += softmax_exp(v[k], m_safe);
    }
    l = block_reduce<V0_THREADS, false>(l, scratch);
    if (threadIdx.x == 0) l_out[blockIdx.x] = l;
}

template <typename T>
__global__ void __launch_bounds__(V0_THREADS)
softmax_v0_three_pass_normalize(const T* __restrict__ x, const float* __restrict__ m_in,
                                const float* __restrict__ l_in, T* __restrict__ y, int cols) {
    constexpr int VEC = Chunk<T>::VEC;
    const size_t base = (size_t)blockIdx.x * cols;
    const bool vec_ok = cols % VEC == 0;
    const float m_safe = softmax_safe_max(m_in[blockIdx.x]);
    const float l = l_in[blockIdx.x];
    const float inv_l = l > 0.f ? 1.f / l : SOFTMAX_NAN;   // all -inf: NaN, as torch.softmax
    for (int c = threadIdx.x; c * VEC < cols; c += V0_THREADS) {
        float v[VEC];
        load_chunk(x + base, c, cols, vec_ok, v);
#pragma unroll
        for (int k = 0; k < VEC; ++k) v[k] = softmax_exp(v[k], m_safe) * inv_l;
        store_chunk(y + base, c, cols, vec_ok, v);
    }
}
// [[/snippet]]

// [[snippet: softmax_v1]]
// v1: one block of V1_THREADS per row. Pass 1 walks the row once, V1_UNROLL chunks per thread per
// step (all loads issued before any math), folding each step into the thread's (m, l) with one
// advance; the block merges its states. Pass 2 reads the row again and writes y.
constexpr int V1_THREADS = 512;
constexpr int V1_UNROLL = 4;

template <typename T>
__global__ void __launch_bounds__(V1_THREADS)
softmax_v1_online(const T* __restrict__ x, T* __restrict__ y, int cols) {
    constexpr int VEC = Chunk<T>::VEC;
    __shared__ SoftmaxState scratch[V1_THREADS / 32];
    const size_t base = (size_t)blockIdx.x * cols;
    const bool vec_ok = cols % VEC == 0;
    const int n_chunks = (cols + VEC - 1) / VEC;

    SoftmaxState st = softmax_state_empty();
    for (int c0 = threadIdx.x; c0 < n_chunks; c0 += V1_THREADS * V1_UNROLL) {
        float v[V1_UNROLL][VEC];                 // [V1_UNROLL, VEC] floats in registers
#pragma unroll
        for (int u = 0; u < V1_UNROLL; ++u) load_chunk(x + base, c0 + u * V1_THREADS, cols, vec_ok, v[u]);
        float tile_max = SOFTMAX_NEG_INF;
#pragma unroll
        for (int u = 0; u < V1_UNROLL; ++u)
#pragma unroll
            for (int k = 0; k < VEC; ++k) tile_max = fmaxf(tile_max, v[u][k]);
        softmax_state_advance(st, tile_max);    // m = max(m, tile_max), l *= e^{m_old - m}
        const float m_safe = softmax_safe_max(st.m);
        float sum = 0.f;
#pragma unroll
        for (int u = 0; u < V1_UNROLL; ++u)
#pragma unroll
            for (int k = 0; k < VEC; ++k) sum += softmax_exp(v[u][k], m_safe);
        st.l += sum;
    }
    st = softmax_block_merge<V1_THREADS>(st, scratch);

    const float m_safe = softmax_safe_max(st.m);
    const float inv_l = softmax_inv_sum(st);
    for (int c = threadIdx.x; c < n_chunks; c += V1_THREADS) {
        float v[VEC];
        load_chunk(x + base, c, cols, vec_ok, v);
#pragma unroll
        for (int k = 0; k < VEC; ++k) v[k] = softmax_exp(v[k], m_safe) * inv_l;
        store_chunk(y + base, c, cols, vec_ok, v);
    }
}
// [[/snippet]]

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

// [[snippet: softmax_v2]]
// v2: one warp per row, V2_ROWS rows per block. Lane l holds chunks l, l + 32, ..., l + 32 (NC - 1):
// each load instruction of the warp reads 512 contiguous bytes. No shared memory, no __syncthreads.
constexpr int V2_ROWS = 8;

template <typename T, int NC>
__global__ void __launch_bounds__(32 * V2_ROWS)
softmax_v2_warp_row(const T* __restrict__ x, T* __restrict__ y, int rows, int cols) {
    constexpr int VEC = Chunk<T>::VEC;
    const int lane = threadIdx.x % 32;
    const int r = blockIdx.x * V2_ROWS + threadIdx.x / 32;
    if (r >= rows) return;                      // whole warps leave together
    const size_t base = (size_t)r * cols;
    const bool vec_ok = cols % VEC == 0;
    float v[NC][VEC];                           // [NC, VEC] floats: this lane's part of the row
    const SoftmaxState mine = softmax_thread_state<T, NC>(x + base, lane, 32, cols, vec_ok, v);
    const SoftmaxState row_state = softmax_warp_merge(mine);
    softmax_write<T, NC>(y + base, lane, 32, cols, vec_ok, v, mine.m, row_state);
}
// [[/snippet]]

// [[snippet: softmax_v3]]
// v3: one block of THREADS per row; thread t holds chunks t, t + THREADS, ..., t + THREADS (NC - 1).
// The block's states are merged through shared memory (softmax_block_merge: warp merge, one
// __syncthreads, merge of the warps' states).
template <typename T, int NC, int THREADS>
__global__ void __launch_bounds__(THREADS)
softmax_v3_block_row(const T* __restrict__ x, T* __restrict__ y, int cols) {
    constexpr int VEC = Chunk<T>::VEC;
    __shared__ SoftmaxState scratch[THREADS / 32];
    const size_t base = (size_t)blockIdx.x * cols;
    const bool vec_ok = cols % VEC == 0;
    float v[NC][VEC];                           // [NC, VEC] floats: this thread's part of the row
    const SoftmaxState mine = softmax_thread_state<T, NC>(x + base, threadIdx.x, THREADS, cols, vec_ok, v);
    const SoftmaxState row_state = softmax_block_merge<THREADS>(mine, scratch);
    softmax_write<T, NC>(y + base, threadIdx.x, THREADS, cols, vec_ok, v, mine.m, row_state);
}
// [[/snippet]]

// [[snippet: softmax_v4]]
// The cluster-level merge of v4 and v6: every block publishes its state in its own shared memory;
// after a cluster barrier warp 0 of every block reads all CL states over DSMEM and merges them in the
// same order, so every block holds the same (m, l) bits in row_state. The second barrier keeps each
// block's shared memory alive until every reader is done, and makes row_state visible block-wide.
// EARLY_ARRIVE (v11) splits that second barrier: a block barrier publishes row_state, each thread only
// arrives at the cluster barrier here, and the caller waits (cluster_wait) after its stores.
template <int CL, bool EARLY_ARRIVE = false>
__device__ __forceinline__ void softmax_cluster_merge(cg::cluster_group& cluster, SoftmaxState bs,
                                                      SoftmaxState& block_state, SoftmaxState& row_state) {
    if constexpr (EARLY_ARRIVE && CL == 1) {    // one block: its state is the row's, no cluster barrier
        if (threadIdx.x == 0) row_state = bs;
        __syncthreads();
        return;
    }
    if (threadIdx.x == 0) block_state = bs;
    cluster.sync();                             // every block's state is published
    if (threadIdx.x < 32) {
        const int lane = threadIdx.x;
        SoftmaxState s = softmax_state_empty();
        if (lane < CL) s = *cluster.map_shared_rank(&block_state, lane);   // DSMEM read
        s = softmax_warp_merge(s);
        if (lane == 0) row_state = s;
    }
    if constexpr (EARLY_ARRIVE) {
        __syncthreads();                        // row_state block-wide; warp 0's reads are consumed (stored)
        cluster_arrive_relaxed();
    } else {
        cluster.sync();
    }
}

// v4: a cluster of CL blocks (V4_THREADS each) per row; grid (CL, rows). Block rank r holds the
// contiguous slice of chunks [r * SLICE, (r + 1) * SLICE), SLICE = NC * V4_THREADS, in registers.
// Each block merges its threads' states, publishes the block state in its shared memory, and after
// a cluster barrier warp 0 of every block reads all CL states over DSMEM and merges them in the same
// order, so every block of the cluster holds the same (m, l) bits. A second cluster barrier keeps
// each block's shared memory alive until every reader is done.
constexpr int V4_THREADS = 1024;

template <typename T, int NC, int CL>
__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(V4_THREADS)
softmax_v4_cluster_row(const T* __restrict__ x, T* __restrict__ y, int cols) {
    constexpr int VEC = Chunk<T>::VEC;
    constexpr int SLICE = NC * V4_THREADS;      // chunks per block
    __shared__ SoftmaxState scratch[V4_THREADS / 32];
    __shared__ SoftmaxState block_state;        // read by the whole cluster
    __shared__ SoftmaxState row_state_smem;
    cg::cluster_group cluster = cg::this_cluster();
    const int rank = (int)cluster.block_rank();
    const size_t base = (size_t)blockIdx.y * cols;
    const bool vec_ok = cols % VEC == 0;
    const int first = rank * SLICE + threadIdx.x;

    float v[NC][VEC];                           // [NC, VEC] floats: this thread's part of the slice
    const SoftmaxState mine = softmax_thread_state<T, NC>(x + base, first, V4_THREADS, cols, vec_ok, v);
    const SoftmaxState bs = softmax_block_merge<V4_THREADS>(mine, scratch);
    softmax_cluster_merge<CL>(cluster, bs, block_state, row_state_smem);
    softmax_write<T, NC>(y + base, first, V4_THREADS, cols, vec_ok, v, mine.m, row_state_smem);
}
// [[/snippet]]

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

// [[snippet: softmax_v5]]
// v5: v3 with raw chunks: one block of THREADS per row, NC chunks per thread (both template parameters),
// grid (rows). For bf16 each thread carries 16 x NC bytes in 4 x NC registers, twice v3's bytes per
// register, so an SM keeps twice the row bytes in flight at the same occupancy.
template <typename T, int NC, int THREADS>
__global__ void __launch_bounds__(THREADS, RawOccupancy<NC, THREADS>::MIN_BLOCKS)
softmax_v5_block_raw(const T* __restrict__ x, T* __restrict__ y, int cols) {
    constexpr int VEC = Chunk<T>::VEC;
    __shared__ SoftmaxState scratch[THREADS / 32];
    const size_t base = (size_t)blockIdx.x * cols;
    const bool vec_ok = cols % VEC == 0;
    uint4 q[NC];                                // [NC] raw 16-byte chunks: this thread's part of the row
    const SoftmaxState mine = softmax_raw_state<T, NC>(x + base, threadIdx.x, THREADS, cols, vec_ok, q);
    const SoftmaxState row_state = softmax_block_merge<THREADS>(mine, scratch);
    softmax_raw_write<T, NC>(y + base, threadIdx.x, THREADS, cols, vec_ok, q, row_state);
}
// [[/snippet]]

// [[snippet: softmax_v6]]
// v6: v4 with raw chunks and a free block size: a cluster of CL blocks of THREADS per row, grid (CL, rows),
// block rank r holding chunks [r * SLICE, (r + 1) * SLICE), SLICE = NC * THREADS. v4's 1024-thread blocks
// leave one or two blocks per SM, so an SM idles through every cluster barrier; with 128-512 threads and
// raw chunks several clusters share each SM and one's barrier overlaps another's loads and stores.
template <typename T, int NC, int THREADS, int CL>
__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(THREADS, RawOccupancy<NC, THREADS>::MIN_BLOCKS)
softmax_v6_cluster_raw(const T* __restrict__ x, T* __restrict__ y, int cols) {
    constexpr int VEC = Chunk<T>::VEC;
    constexpr int SLICE = NC * THREADS;         // chunks per block
    __shared__ SoftmaxState scratch[THREADS / 32];
    __shared__ SoftmaxState block_state;        // read by the whole cluster
    __shared__ SoftmaxState row_state_smem;
    cg::cluster_group cluster = cg::this_cluster();
    const int rank = (int)cluster.block_rank();
    const size_t base = (size_t)blockIdx.y * cols;
    const bool vec_ok = cols % VEC == 0;
    const int first = rank * SLICE + threadIdx.x;

    uint4 q[NC];                                // [NC] raw 16-byte chunks: this thread's part of the slice
    const SoftmaxState mine = softmax_raw_state<T, NC>(x + base, first, THREADS, cols, vec_ok, q);
    const SoftmaxState bs = softmax_block_merge<THREADS>(mine, scratch);
    softmax_cluster_merge<CL>(cluster, bs, block_state, row_state_smem);
    softmax_raw_write<T, NC>(y + base, first, THREADS, cols, vec_ok, q, row_state_smem);
}
// [[/snippet]]

// [[snippet: softmax_v7]]
// v7: v2 with raw chunks: one warp per row, ROWS rows per block, lane l holding chunks l, l + 32, ...
// MIN_BLOCKS is the occupancy asked of ptxas (a register cap of 65536 / (MIN_BLOCKS x 32 ROWS)). For
// bf16 rows of 1024 (4 chunks, 16 data registers per lane) 8 blocks of 8 warps is 32 registers per
// thread and 64 rows per SM: 132 x 64 >= 8192 rows, so the whole input is in flight in one wave.
template <typename T, int NC, int ROWS, int MIN_BLOCKS>
__global__ void __launch_bounds__(32 * ROWS, MIN_BLOCKS)
softmax_v7_warp_raw(const T* __restrict__ x, T* __restrict__ y, int rows, int cols) {
    const int lane = threadIdx.x % 32;
    const int r = blockIdx.x * ROWS + threadIdx.x / 32;
    if (r >= rows) return;                      // whole warps leave together
    const size_t base = (size_t)r * cols;
    const bool vec_ok = cols % Chunk<T>::VEC == 0;
    uint4 q[NC];                                // [NC] raw 16-byte chunks: this lane's part of the row
    const SoftmaxState mine = softmax_raw_state<T, NC>(x + base, lane, 32, cols, vec_ok, q);
    const SoftmaxState row_state = softmax_warp_merge(mine);
    softmax_raw_write<T, NC>(y + base, lane, 32, cols, vec_ok, q, row_state);
}
// [[/snippet]]

// [[snippet: softmax_v8]]
// v8: a warp walks rows r, r + G, r + 2G, ... (G = gridDim.x x ROWS warps in the grid). It holds the
// current row widened to floats (v2's one exponential per element) and the next row as raw chunks in
// flight: the next row's loads are issued right after the current row has arrived, before its max, exp,
// merge and stores. In a one-wave launch (v2, v7) every warp reads, then every warp computes, then every
// warp writes, so HBM idles through the math and the read-to-write turnaround; here one row's math
// and stores overlap the next row's loads on every warp.
template <typename T, int NC, int ROWS, int MIN_BLOCKS>
__global__ void __launch_bounds__(32 * ROWS, MIN_BLOCKS)
softmax_v8_warp_stream(const T* __restrict__ x, T* __restrict__ y, int rows, int cols) {
    constexpr int VEC = Chunk<T>::VEC;
    const int lane = threadIdx.x % 32;
    const int step = gridDim.x * ROWS;
    int r = blockIdx.x * ROWS + threadIdx.x / 32;
    if (r >= rows) return;                      // whole warps leave together
    const bool vec_ok = cols % VEC == 0;
    uint4 q[NC];                                // [NC] raw chunks of the row in flight
#pragma unroll
    for (int j = 0; j < NC; ++j) load_raw(x + (size_t)r * cols, lane + 32 * j, cols, vec_ok, q[j]);
    for (; r < rows; r += step) {
        float v[NC][VEC];                       // [NC, VEC] floats: the current row (waits for its loads)
#pragma unroll
        for (int j = 0; j < NC; ++j) unpack(q[j], v[j]);
        if (r + step < rows) {                  // prefetch: q is free again
#pragma unroll
            for (int j = 0; j < NC; ++j) load_raw(x + (size_t)(r + step) * cols, lane + 32 * j, cols, vec_ok, q[j]);
        }
        const SoftmaxState mine = softmax_values_state<NC, VEC>(v);
        const SoftmaxState row_state = softmax_warp_merge(mine);
        softmax_write<T, NC>(y + (size_t)r * cols, lane, 32, cols, vec_ok, v, mine.m, row_state);
    }
}
// [[/snippet]]

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

// [[snippet: softmax_v10]]
// v10: v6 with one exponential per element. v5-v9 take e^{x - m_t} for the thread's sum and then
// e^{x - m} again for the output: two MUFU.EX2 per element, and MUFU issues 16 per clock per SM, an
// eighth of the FP32 rate. At 1024 x 65536 bf16 that is ~32 us of exponentials on the whole chip against
// a 63 us floor for the bytes, and in a cluster kernel they sit between the read and the write.
// The sum pass here writes e = e^{x - m_t} back over x in the chunk registers (fp32 bits for fp32; for
// bf16 the value rounded to bf16, and the sum taken over the rounded values, so the outputs still sum
// to 1 before their own rounding), and the write is y = e * (e^{m_t - m} / l): one multiply per
// element, one exponential per thread. Registers are unchanged (e takes x's bits).
template <typename T>
__device__ __forceinline__ float round_to(float v) {
    return sizeof(T) == 4 ? v : __bfloat162float(__float2bfloat16_rn(v));
}

template <typename T, int NC>
__device__ __forceinline__ SoftmaxState softmax_chunks_exp_in_place(uint4 (&q)[NC]) {
    constexpr int VEC = Chunk<T>::VEC;
    const float m_t = raw_max<T, NC>(q);
    const float m_safe = softmax_safe_max(m_t);
    float l_t = 0.f;
#pragma unroll
    for (int j = 0; j < NC; ++j) {
        float v[VEC];
        unpack(q[j], v);
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
            v[k] = round_to<T>(softmax_exp(v[k], m_safe));
            l_t += v[k];
        }
        q[j] = pack_raw(v);                     // exact: the values are already representable in T
    }
    return {m_t, l_t};
}

// y = e * (e^{m_t - m} / l): 0 where the thread saw only -inf (e = 0), NaN for a fully masked row (1/l).
template <typename T, int NC>
__device__ __forceinline__ void softmax_scaled_write(T* __restrict__ row, int first, int stride, int cols,
                                                     bool vec_ok, const uint4 (&q)[NC], float m_t,
                                                     SoftmaxState row_state) {
    constexpr int VEC = Chunk<T>::VEC;
    const float c = softmax_rescale(m_t, row_state.m) * softmax_inv_sum(row_state);
#pragma unroll
    for (int j = 0; j < NC; ++j) {
        float v[VEC];
        unpack(q[j], v);
#pragma unroll
        for (int k = 0; k < VEC; ++k) v[k] *= c;
        store_chunk(row, first + j * stride, cols, vec_ok, v);
    }
}

// The row of v10 and v11 (EARLY_ARRIVE: the split exit barrier, see v11).
template <typename T, int NC, int THREADS, int CL, bool EARLY_ARRIVE>
__device__ __forceinline__ void softmax_cluster_once_row(const T* __restrict__ x, T* __restrict__ y, int cols) {
    constexpr int SLICE = NC * THREADS;         // chunks per block
    __shared__ SoftmaxState scratch[THREADS / 32];
    __shared__ SoftmaxState block_state;        // read by the whole cluster
    __shared__ SoftmaxState row_state_smem;
    cg::cluster_group cluster = cg::this_cluster();
    const int rank = (int)cluster.block_rank();
    const size_t base = (size_t)blockIdx.y * cols;
    const bool vec_ok = cols % Chunk<T>::VEC == 0;
    const int first = rank * SLICE + threadIdx.x;

    uint4 q[NC];                                // [NC] raw chunks, then e^{x - m_t} in their place
#pragma unroll
    for (int j = 0; j < NC; ++j) load_raw(x + base, first + j * THREADS, cols, vec_ok, q[j]);
    const SoftmaxState mine = softmax_chunks_exp_in_place<T, NC>(q);
    const SoftmaxState bs = softmax_block_merge<THREADS>(mine, scratch);
    softmax_cluster_merge<CL, EARLY_ARRIVE>(cluster, bs, block_state, row_state_smem);
    softmax_scaled_write<T, NC>(y + base, first, THREADS, cols, vec_ok, q, mine.m, row_state_smem);
    if constexpr (EARLY_ARRIVE && CL > 1) cluster_wait();   // the peers arrived after their DSMEM reads
}

template <typename T, int NC, int THREADS, int CL>
__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(THREADS, RawOccupancy<NC, THREADS>::MIN_BLOCKS)
softmax_v10_cluster_once(const T* __restrict__ x, T* __restrict__ y, int cols) {
    softmax_cluster_once_row<T, NC, THREADS, CL, false>(x, y, cols);
}
// [[/snippet]]

// [[snippet: softmax_v11]]
// v11: v10 with the second cluster barrier split. Nsight Compute on the H200 (2026-11-29) put 8-12% of
// v10's stall cycles per issued instruction on membar (11-18% on barrier). cluster.sync() is an arrive
// with release semantics and a wait: MEMBAR.ALL.GPU + ERRBAR before the arrive in SASS, a GPU-scope fence
// that every warp pays. The first barrier of softmax_cluster_merge needs it (block_state must be visible
// to the peers); the second only keeps block_state alive for the peers' DSMEM reads and publishes
// row_state inside the block. Here a __syncthreads publishes row_state (warp 0's DSMEM reads are
// complete by then: their merged value has been stored), every thread arrives relaxed (UCGABAR_ARV
// alone; cluster_arrive_relaxed, row_stream.cuh), the stores run, and each thread waits for the
// cluster's arrivals just before it exits, long after they happened. Same instances as v10 (and v6).
template <typename T, int NC, int THREADS, int CL>
__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(THREADS, RawOccupancy<NC, THREADS>::MIN_BLOCKS)
softmax_v11_early_arrive(const T* __restrict__ x, T* __restrict__ y, int cols) {
    softmax_cluster_once_row<T, NC, THREADS, CL, true>(x, y, cols);
}
// [[/snippet]]

