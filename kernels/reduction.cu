// reduction.cu: chapter 5, the sum of a 1-D array, s = x[0] + x[1] + ... + x[n-1], fp32 or bf16 input,
// fp32 accumulation, fp32 result. Every byte of x is read once; the bar is the read bandwidth of HBM.
// Versions, each against the one before:
//
//   v0_atomic        one thread per element, each does atomicAdd(out, x[i]): n atomics on one address
//   v1_interleaved   one element per thread into shared memory, a tree in the block: at level k the
//                    threads t % 2^(k+1) == 0 add the neighbour 2^k away (the active threads are
//                    scattered over every warp: divergent warps); each block writes one partial, the
//                    host launches again on the partials until one value is left
//   v2_sequential    the same tree with sequential addressing: threads t < s add s[t + s], s halving;
//                    the active threads are contiguous, whole warps retire together, no conflicts
//   v3_shuffle       no shared-memory tree: each warp sums its 32 values with shuffles (warp_sum),
//                    8 warp totals meet in shared memory, warp 0 sums them with shuffles again
//   v4_vec           a grid of a few blocks per SM strides over x with 16-byte loads (4 fp32 or 8 bf16),
//                    UNROLL loads per thread per iteration (about 2 in flight on average, see UNROLL),
//                    fp32 accumulators; one partial per block, then
//                    a second tiny launch (reduce_v4_finish) sums the partials in a fixed order
//   v5_lastblock     v4 in one launch: each block writes its partial, fences, takes a ticket from an
//                    atomic counter; the block that draws the last ticket sums all partials in index
//                    order (deterministic) and re-arms the counter for the next launch
//
// v6 (clusters, Hopper only) lives in reduction_cluster.cu, so that this file builds for sm_80 as well.
// The shared building blocks (block_sum, thread_sum, sum_partials, THREADS, UNROLL) are in
// include/reduction.cuh. bf16 variants (suffix _bf16) of v4-v5 load 8 bf16 per 16 bytes and widen them
// exactly to fp32. Every kernel runs with blocks of THREADS threads; the result of v1-v5 does not depend
// on timing. v4-v5 are held to 32 registers (__launch_bounds__(THREADS, 8) where ptxas needs the hint), so that
// 8 blocks of 256 threads fit on an SM at once: the grid of 8 blocks per SM is one wave.
#include "reduction.cuh"

// [[snippet: reduce_v0]]
// out must hold 0 before the launch (reduce_v0_zero, one thread, runs first in the same stream). Every
// element is one atomic read-modify-write on the same 4 bytes of L2: the order of the additions is
// whatever order the atomics arrive in.
extern "C" __global__ void reduce_v0_zero(float* __restrict__ out) { *out = 0.f; }

extern "C" __global__ void __launch_bounds__(THREADS)
reduce_v0_atomic(const float* __restrict__ x, float* __restrict__ out, long long n) {
    const long long i = (long long)blockIdx.x * THREADS + threadIdx.x;
    if (i < n) atomicAdd(out, x[i]);
}
// [[/snippet]]

// [[snippet: reduce_v1]]
// partial[b] = sum of x[256 b .. 256 b + 255]. Level k: thread t with t % 2^(k+1) == 0 adds s[t + 2^k].
extern "C" __global__ void __launch_bounds__(THREADS)
reduce_v1_interleaved(const float* __restrict__ x, float* __restrict__ partial, long long n) {
    __shared__ float s[THREADS];  // [THREADS] one value per thread
    const int t = threadIdx.x;
    const long long i = (long long)blockIdx.x * THREADS + t;
    s[t] = i < n ? x[i] : 0.f;
    __syncthreads();
    for (int stride = 1; stride < THREADS; stride *= 2) {
        if (t % (2 * stride) == 0) s[t] += s[t + stride];  // level 1: lanes 0, 2, 4, ... of every warp
        __syncthreads();
    }
    if (t == 0) partial[blockIdx.x] = s[0];
}
// [[/snippet]]

// [[snippet: reduce_v2]]
// The same partials; the active threads are 0 .. stride-1, so the upper warps drop out whole.
extern "C" __global__ void __launch_bounds__(THREADS)
reduce_v2_sequential(const float* __restrict__ x, float* __restrict__ partial, long long n) {
    __shared__ float s[THREADS];  // [THREADS] one value per thread
    const int t = threadIdx.x;
    const long long i = (long long)blockIdx.x * THREADS + t;
    s[t] = i < n ? x[i] : 0.f;
    __syncthreads();
    for (int stride = THREADS / 2; stride > 0; stride >>= 1) {
        if (t < stride) s[t] += s[t + stride];  // lane l reads word l + stride: 32 distinct banks
        __syncthreads();
    }
    if (t == 0) partial[blockIdx.x] = s[0];
}
// [[/snippet]]

// [[snippet: reduce_v3]]
extern "C" __global__ void __launch_bounds__(THREADS)
reduce_v3_shuffle(const float* __restrict__ x, float* __restrict__ partial, long long n) {
    const long long i = (long long)blockIdx.x * THREADS + threadIdx.x;
    const float v = block_sum(i < n ? x[i] : 0.f);
    if (threadIdx.x == 0) partial[blockIdx.x] = v;
}
// [[/snippet]]

// [[snippet: reduce_v4]]
template <typename T>
__device__ __forceinline__ void reduce_vec(const T* __restrict__ x, float* __restrict__ partial, long long n) {
    const float s = block_sum(thread_sum<T>(x, n));
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

extern "C" __global__ void __launch_bounds__(THREADS, 8)
reduce_v4_vec(const float* __restrict__ x, float* __restrict__ partial, long long n) {
    reduce_vec<float>(x, partial, n);
}
extern "C" __global__ void __launch_bounds__(THREADS)
reduce_v4_vec_bf16(const __nv_bfloat16* __restrict__ x, float* __restrict__ partial, long long n) {
    reduce_vec<__nv_bfloat16>(x, partial, n);
}

// The second launch: one block sums the m partials.
extern "C" __global__ void __launch_bounds__(THREADS)
reduce_v4_finish(const float* __restrict__ partial, float* __restrict__ out, int m) {
    const float s = sum_partials(partial, m);
    if (threadIdx.x == 0) *out = s;
}
// [[/snippet]]

// [[snippet: reduce_v5]]
// counter: one uint32, 0 before the launch and 0 again after it (the last block re-arms it).

template <typename T>
__device__ __forceinline__ void reduce_lastblock(const T* __restrict__ x, float* partial,
                                                 unsigned* counter, float* __restrict__ out, long long n) {
    __shared__ bool is_last;
    const float s = block_sum(thread_sum<T>(x, n));
    if (threadIdx.x == 0) {
        partial[blockIdx.x] = s;
        __threadfence();                                  // the partial is visible GPU-wide ...
        const unsigned ticket = atomicAdd(counter, 1u);   // ... before this block counts itself in
        is_last = (ticket == gridDim.x - 1);
    }
    __syncthreads();                                      // also orders block_sum's shared memory reuse
    if (!is_last) return;                                 // nobody waits: no deadlock, any grid size
    __threadfence();
    const float total = sum_partials(partial, gridDim.x); // index order, whichever block came last
    if (threadIdx.x == 0) {
        *out = total;
        *counter = 0u;                                    // re-arm for the next launch
    }
}

extern "C" __global__ void __launch_bounds__(THREADS, 8)
reduce_v5_lastblock(const float* __restrict__ x, float* partial, unsigned* counter, float* out, long long n) {
    reduce_lastblock<float>(x, partial, counter, out, n);
}
extern "C" __global__ void __launch_bounds__(THREADS, 8)
reduce_v5_lastblock_bf16(const __nv_bfloat16* __restrict__ x, float* partial, unsigned* counter, float* out,
                         long long n) {
    reduce_lastblock<__nv_bfloat16>(x, partial, counter, out, n);
}
// [[/snippet]]

