// fusion_scalar.cuh: scalar math of the fused element-wise ops (chapter 8), on bf16 *bit patterns*.
// Self-contained (no includes, only CUDA built-ins): kernels/fusion.cu includes it, and
// kernels/fusion.py passes the same text as the `preamble` of its CuPy ElementwiseKernel /
// ReductionKernel versions, so the hand-written kernels and the library route share one formula.
#pragma once

// bf16 is the upper half of an fp32: widening is a shift, exact.
__device__ __forceinline__ float bf16_bits_to_float(unsigned short h) {
    return __uint_as_float(((unsigned int)h) << 16);
}

// fp32 -> bf16, round to nearest even (what __float2bfloat16_rn and torch do); NaN stays a quiet NaN.
__device__ __forceinline__ unsigned short float_to_bf16_bits(float f) {
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}

// GELU with the exact erf form, torch.nn.functional.gelu's default (approximate='none').
__device__ __forceinline__ float gelu_erf(float v) {
    return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
}

// SiLU (swish): v * sigmoid(v) = v / (1 + e^-v); -inf-safe (e^-v = inf gives -0).
__device__ __forceinline__ float silu(float v) { return v / (1.0f + expf(-v)); }

// The residual stream is stored in bf16, so the norm sees the rounded sum (as torch and vLLM do).
__device__ __forceinline__ float add_round_bf16(unsigned short a, unsigned short b) {
    return bf16_bits_to_float(float_to_bf16_bits(bf16_bits_to_float(a) + bf16_bits_to_float(b)));
}

__device__ __forceinline__ float square(float v) { return v * v; }
