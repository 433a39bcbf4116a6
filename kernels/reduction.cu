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
//   v6_cluster_c{C}  v5 with clusters of C blocks (Hopper): the C block totals meet through DSMEM, rank 0
//                    writes one partial per cluster, so C times fewer partials and atomics
//
// bf16 variants (suffix _bf16) of v4-v6 load 8 bf16 per 16 bytes and widen them exactly to fp32.
// Every kernel runs with blocks of THREADS threads; the result of v1-v6 does not depend on timing.
// v4-v6 are held to 32 registers (__launch_bounds__(THREADS, 8) where ptxas needs the hint), so that
// 8 blocks of 256 threads fit on an SM at once: the grid of 8 blocks per SM is one wave.
#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include "common.cuh"

namespace cg = cooperative_groups;

#define THREADS 256   // block size of every kernel in this file
// 16-byte loads per thread per loop iteration in v4-v6. The source reads all UNROLL before using any, but at
// 32 registers (the cap of __launch_bounds__(THREADS, 8); v4_vec_bf16 lands there without it) ptxas
// (sm_90, CUDA 13.0) does not keep 4 x 16 bytes of results live: the loop's SASS issues 2 loads, waits for
// the first, then issues the other 2 (fp32 v6: 3, then 1). About 2 loads (32 bytes) per thread are in
// flight on average, at most 3 at once: 2048 threads x 32 B = 64 KiB per SM, still well above what
// Little's law asks for (chapter 5, section 5.7). With __launch_bounds__(THREADS, 4) instead, ptxas gives
// the loop 38-40 registers and issues all 4 at once, but fewer blocks then fit on an SM.
#define UNROLL 4

// [[snippet: reduce_v0]]
// out must hold 0 before the launch. Every element is one atomic read-modify-write on the same
// 4 bytes of L2: the order of the additions is whatever order the atomics arrive in.
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

// [[snippet: block_sum]]
// Sum over the THREADS threads of a block; the result is valid in thread 0. Every thread must call it.
// Level 1: each warp's 32 values by butterfly shuffles (warp_sum, common.cuh), no shared memory.
// Level 2: the 8 warp totals through shared memory, summed by warp 0 with shuffles again.
// The order of the additions is fixed by the lane and warp numbers: the same input gives the same bits.
__device__ __forceinline__ float block_sum(float v) {
    __shared__ float warp_total[THREADS / 32];  // [8] one per warp
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    v = warp_sum(v);
    if (lane == 0) warp_total[warp] = v;
    __syncthreads();
    if (warp == 0) v = warp_sum(lane < THREADS / 32 ? warp_total[lane] : 0.f);
    return v;
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

// [[snippet: thread_sum]]
// 16 bytes of input: 4 fp32, or 8 bf16 (two per 32-bit word, element 2j in the low half).
// bf16 -> fp32 is exact: a bf16 is the upper 16 bits of the fp32 with the same value.
template <typename T>
__device__ __forceinline__ void add16(float4& acc, const uint4 r) {
    if constexpr (sizeof(T) == 4) {
        acc.x += __uint_as_float(r.x); acc.y += __uint_as_float(r.y);
        acc.z += __uint_as_float(r.z); acc.w += __uint_as_float(r.w);
    } else {
        acc.x += __uint_as_float(r.x << 16) + __uint_as_float(r.x & 0xffff0000u);
        acc.y += __uint_as_float(r.y << 16) + __uint_as_float(r.y & 0xffff0000u);
        acc.z += __uint_as_float(r.z << 16) + __uint_as_float(r.z & 0xffff0000u);
        acc.w += __uint_as_float(r.w << 16) + __uint_as_float(r.w & 0xffff0000u);
    }
}

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

// This thread's share of x: 16-byte chunks i, i + G, i + 2G, ... (G = all threads of the grid), UNROLL
// loads written before any is used (the compiled loop keeps about 2 in flight, see UNROLL), four fp32
// accumulators; then at most one of the n % E trailing elements (E = elements per 16 bytes).
// x must be 16-byte aligned.
template <typename T>
__device__ __forceinline__ float thread_sum(const T* __restrict__ x, long long n) {
    constexpr int E = 16 / sizeof(T);
    const uint4* __restrict__ x16 = reinterpret_cast<const uint4*>(x);  // [n16] chunks of 16 bytes
    const long long n16 = n / E;
    const long long G = (long long)gridDim.x * THREADS;
    const long long gtid = (long long)blockIdx.x * THREADS + threadIdx.x;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    long long i = gtid;
    for (; i + (UNROLL - 1) * G < n16; i += UNROLL * G) {
        uint4 r[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) r[u] = x16[i + u * G];  // compiled: ~2 in flight, see UNROLL
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) add16<T>(acc, r[u]);
    }
    for (; i < n16; i += G) add16<T>(acc, x16[i]);
    float s = (acc.x + acc.y) + (acc.z + acc.w);
    const long long tail = n16 * E + gtid;  // fewer than E elements are left; thread gtid takes one
    if (tail < n) s += to_float(x[tail]);
    return s;
}
// [[/snippet]]

// [[snippet: reduce_v4]]
// Sum of m partials by one block, in a fixed order: thread t adds partial[t], partial[t + 256], ... in
// that order, 4 loads issued before the adds (partials are few; their latency is what costs). __ldcg
// reads from L2, so a block never sees a stale L1 copy of another block's partial.
__device__ __forceinline__ float sum_partials(const float* partial, int m) {
    float s = 0.f;
    int i = threadIdx.x;
    for (; i + 3 * THREADS < m; i += 4 * THREADS) {
        const float a0 = __ldcg(partial + i), a1 = __ldcg(partial + i + THREADS),
                    a2 = __ldcg(partial + i + 2 * THREADS), a3 = __ldcg(partial + i + 3 * THREADS);
        s += a0; s += a1; s += a2; s += a3;
    }
    for (; i < m; i += THREADS) s += __ldcg(partial + i);
    return block_sum(s);
}

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

// [[snippet: reduce_v6]]
// Grid: a multiple of C blocks, clusters of C consecutive blocks. Cluster c = blockIdx.x / C writes
// partial[c]; the last cluster to arrive sums the gridDim.x / C partials in index order.
template <typename T, int C>
__device__ __forceinline__ void reduce_cluster(const T* __restrict__ x, float* partial, unsigned* counter,
                                               float* __restrict__ out, long long n) {
    __shared__ float block_total;  // this block's sum, read by rank 0 of the cluster through DSMEM
    __shared__ bool is_last;
    cg::cluster_group cluster = cg::this_cluster();
    const float s = block_sum(thread_sum<T>(x, n));
    if (threadIdx.x == 0) block_total = s;
    cluster.sync();                                       // every block's total is in its shared memory
    const unsigned rank = cluster.block_rank();
    if (rank == 0 && threadIdx.x == 0) {
        float c = 0.f;
#pragma unroll
        for (int q = 0; q < C; ++q) c += *cluster.map_shared_rank(&block_total, q);  // rank order
        partial[blockIdx.x / C] = c;
        __threadfence();
        const unsigned ticket = atomicAdd(counter, 1u);
        is_last = (ticket == gridDim.x / C - 1);
    }
    cluster.sync();                                       // peers keep block_total alive until it is read
    if (rank != 0 || !is_last) return;                    // (is_last is only read in rank 0)
    __threadfence();
    const float total = sum_partials(partial, gridDim.x / C);
    if (threadIdx.x == 0) {
        *out = total;
        *counter = 0u;
    }
}

#define REDUCE_CLUSTER_KERNELS(C)                                                                      \
    extern "C" __global__ void __cluster_dims__(C, 1, 1) __launch_bounds__(THREADS, 8)                  \
    reduce_v6_cluster_c##C(const float* __restrict__ x, float* partial, unsigned* counter, float* out, \
                           long long n) {                                                              \
        reduce_cluster<float, C>(x, partial, counter, out, n);                                         \
    }                                                                                                  \
    extern "C" __global__ void __cluster_dims__(C, 1, 1) __launch_bounds__(THREADS, 8)                  \
    reduce_v6_cluster_bf16_c##C(const __nv_bfloat16* __restrict__ x, float* partial, unsigned* counter,\
                                float* out, long long n) {                                             \
        reduce_cluster<__nv_bfloat16, C>(x, partial, counter, out, n);                                 \
    }

REDUCE_CLUSTER_KERNELS(2)
REDUCE_CLUSTER_KERNELS(4)
REDUCE_CLUSTER_KERNELS(8)
// [[/snippet]]
