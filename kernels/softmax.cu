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
//
// Templates are instantiated by name expression from kernels/softmax.py (softmax_v2_warp_row<float, 8>).
// The (m, l) state and its merge live in online_softmax.cuh, shared with chapter 15.
#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include "common.cuh"
#include "online_softmax.cuh"

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
// softmax_write scales each value by e^{m_t - m} / l and stores it.
template <typename T, int NC>
__device__ __forceinline__ SoftmaxState softmax_thread_state(const T* __restrict__ row, int first, int stride,
                                                             int cols, bool vec_ok,
                                                             float (&v)[NC][Chunk<T>::VEC]) {
    constexpr int VEC = Chunk<T>::VEC;
#pragma unroll
    for (int j = 0; j < NC; ++j) load_chunk(row, first + j * stride, cols, vec_ok, v[j]);
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
    if (threadIdx.x == 0) block_state = bs;
    cluster.sync();                             // every block's state is published
    if (threadIdx.x < 32) {
        const int lane = threadIdx.x;
        SoftmaxState s = softmax_state_empty();
        if (lane < CL) s = *cluster.map_shared_rank(&block_state, lane);   // DSMEM read
        s = softmax_warp_merge(s);
        if (lane == 0) row_state_smem = s;
    }
    cluster.sync();                             // remote reads done; row_state_smem visible block-wide
    softmax_write<T, NC>(y + base, first, V4_THREADS, cols, vec_ok, v, mine.m, row_state_smem);
}
// [[/snippet]]
