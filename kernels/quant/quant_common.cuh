// quant_common.cuh: what every chapter 9 kernel file includes (bf16/fp16/fp8 types, the INT4 and mma
// helpers, and two bf16 unpacking one-liners).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include "common.cuh"
#include "int4.cuh"
#include "mma_sm80.cuh"

// Block-wide max of non-negative floats for 256 threads; every thread gets the result.
__device__ __forceinline__ float block_max_256(float v, float* red /* [8] in smem */) {
    v = warp_max(v);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    float m = red[threadIdx.x & 7];
    m = warp_max(m);          // lanes 0..7 hold the 8 warp maxima, repeated; max over all is the same
    __syncthreads();          // red may be reused by the caller
    return m;
}

__device__ __forceinline__ float bf16_lo(unsigned u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float bf16_hi(unsigned u) { return __uint_as_float(u & 0xffff0000u); }
