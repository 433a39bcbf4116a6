// v0_naive.cu: layernorm_v0_naive and rmsnorm_v0_naive: one block of 256 threads per row; sum and sum of
// squares in one sweep, var = E[x^2] - E[x]^2 (cancels catastrophically for a large mean), then a second
// sweep re-reads x to normalize.
#include "norm_common.cuh"

// [[snippet: layernorm_v0]]
// One block of 256 threads per row. Sweep 1 accumulates sum x and sum x^2 (strided, coalesced);
// var = E[x^2] - E[x]^2 in fp32. Sweep 2 reads x again (from L2 if the row is still there).
template <typename T>
__device__ __forceinline__ void naive_row(const T* __restrict__ x, const T* __restrict__ w,
                                          const T* __restrict__ b, T* __restrict__ y, int n, float eps,
                                          bool rms) {
    __shared__ float red[2][33];
    const size_t base = (size_t)blockIdx.x * n;
    float s = 0.f, ss = 0.f;
    for (int c = threadIdx.x; c < n; c += blockDim.x) {
        const float v = to_f32(x[base + c]);
        s += v;
        ss += v * v;
    }
    s = row_sum<256, 1>(s, red[0]);
    ss = row_sum<256, 1>(ss, red[1]);
    const float mean = rms ? 0.f : s / n;
    const float var = rms ? ss / n : fmaxf(ss / n - mean * mean, 0.f);   // the cancellation
    const float rstd = rsqrtf(var + eps);
    for (int c = threadIdx.x; c < n; c += blockDim.x) {
        const float v = (to_f32(x[base + c]) - mean) * rstd * to_f32(w[c]);
        y[base + c] = from_f32<T>(rms ? v : v + to_f32(b[c]));
    }
}

template <typename T>
__global__ void __launch_bounds__(256) layernorm_v0_naive(const T* __restrict__ x, const T* __restrict__ w,
                                                          const T* __restrict__ b, T* __restrict__ y,
                                                          int rows, int n, float eps) {
    naive_row<T>(x, w, b, y, n, eps, false);
}
// [[/snippet]]

// [[snippet: rmsnorm_v0]]
template <typename T>
__global__ void __launch_bounds__(256) rmsnorm_v0_naive(const T* __restrict__ x, const T* __restrict__ w,
                                                        T* __restrict__ y, int rows, int n, float eps) {
    naive_row<T>(x, w, nullptr, y, n, eps, true);
}
// [[/snippet]]
