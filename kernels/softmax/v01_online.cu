// v01_online.cu (chapter 6): against v0, one kernel per row with the online (m, l) recurrence: the max
// and the sum in one read, the block's states merged, then a second read to write y. Two reads.
#include "chunks.cuh"

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
