// reduction.cuh: the device building blocks the sum versions of chapter 5 share (reduction.cu: v0-v5,
// reduction_cluster.cu: v6). block_sum (v3 on), thread_sum (v4 on), sum_partials (v4 on). A later version
// that needs a different helper gets its own copy in its own file: these stay as the chapter shows them.
#pragma once
#include <cuda_bf16.h>

#include "common.cuh"

#define THREADS 256   // block size of every sum kernel (reduction.cu, reduction_cluster.cu)
// 16-byte loads per thread per loop iteration in v4-v6. The source reads all UNROLL before using any, but at
// 32 registers (the cap of __launch_bounds__(THREADS, 8); v4_vec_bf16 lands there without it) ptxas
// (sm_90, CUDA 13.0) does not keep 4 x 16 bytes of results live: the loop's SASS issues 2 loads, waits for
// the first, then issues the other 2 (fp32 v6: 3, then 1). About 2 loads (32 bytes) per thread are in
// flight on average, at most 3 at once: 2048 threads x 32 B = 64 KiB per SM, still well above what
// Little's law asks for (chapter 5, section 5.7). With __launch_bounds__(THREADS, 4) instead, ptxas gives
// the loop 38-40 registers and issues all 4 at once, but fewer blocks then fit on an SM.
#define UNROLL 4

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

// [[snippet: sum_partials]]
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

// [[/snippet]]
