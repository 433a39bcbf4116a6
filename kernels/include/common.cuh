// common.cuh: small device helpers shared by several ops.
// Warp reductions, 16-byte vector access, integer helpers. NVRTC-friendly: no host headers.
#pragma once

#define FULL_MASK 0xffffffffu

__host__ __device__ __forceinline__ int ceil_div(int a, int b) { return (a + b - 1) / b; }

// Sum / max over the 32 lanes of a warp; every lane gets the result (butterfly pattern).
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(FULL_MASK, v, offset);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, offset));
    return v;
}

// Read-only 16-byte load that bypasses L1 allocation hints: streaming data touched once.
__device__ __forceinline__ float4 load_stream(const float4* p) { return __ldcs(p); }
__device__ __forceinline__ void store_stream(float4* p, float4 v) { __stcs(p, v); }

// %globaltimer-free SM clock, for in-kernel latency experiments only.
__device__ __forceinline__ long long sm_clock() { return clock64(); }
