// launch.cu: chapter 3, streams, events and what a launch costs.
//
// Experiments (not versions of an op):
//   empty_kernel   does nothing: its time is the launch itself
//   spin_ns        one thread waits on %globaltimer for `ns` nanoseconds: holds a stream busy while
//                  the host queues work behind it
//   chunk_work     y = x after `iters` dependent steps v <- fma(v, 0.5, x) per element: a kernel whose
//                  duration is set by `iters`, for the copy/compute overlap experiment (v tends to 2x)

__device__ __forceinline__ unsigned long long global_timer_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// [[snippet: empty_kernel]]
extern "C" __global__ void empty_kernel() { }
// [[/snippet]]

// [[snippet: spin_ns]]
extern "C" __global__ void spin_ns(unsigned long long ns) {
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        const unsigned long long t0 = global_timer_ns();
        while (global_timer_ns() - t0 < ns) { }
    }
}
// [[/snippet]]

// [[snippet: chunk_work]]
extern "C" __global__ void chunk_work(const float* __restrict__ x, float* __restrict__ y, long long n,
                                      int iters) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float xi = x[i];
        float v = xi;
        for (int k = 0; k < iters; ++k) v = fmaf(v, 0.5f, xi);   // a dependent chain of FMAs
        y[i] = v;
    }
}
// [[/snippet]]
