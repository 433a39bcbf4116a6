// v00_three_pass.cu (chapter 6): safe softmax as three kernels, one block per row each: row max -> m[],
// sum of e^{x - m} -> l[], then y = e^{x - m} / l. Reads x three times; the baseline of the ladder.
#include "chunks.cuh"

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
