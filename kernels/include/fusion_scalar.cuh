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

// [[snippet: gelu_poly]]
// GELU without erff: y = v * Phi(v), Phi the standard normal CDF. erff costs about 28 instructions
// (two polynomials whose coefficients are picked per element by 9 FSEL, plus an exp for |x| >= 1);
// this costs 13. With a = min(|v|, 13) and e = Phi(-a) = 2^Q(a):
//   v >= 0: y = v (1 - e) = v - a e;      v < 0: y = v e = 0 - a e;      so y = max(v, 0) - a e.
// Q(a) ~ log2(Phi(-a)) is a degree-9 polynomial fitted on [0, 13] (weighted least squares toward
// minimax, coefficients rounded to fp32). Its error in fp32, |dQ| <= 6.3e-5, is a relative error of
// ln2 * dQ <= 4.4e-5 in e, hence in y on both sides (1 - e >= 1/2): under 1/40 of half a bf16 ulp
// (>= 2^-9 relative), wherever e >= 2^-126 (|v| <= 12.95). Beyond, e flushes to 0 and y = max(v, 0):
// exact for v > 0 (Phi = 1 in fp32), and 0 for v < -12.95 where |gelu(v)| < 2^-122 (~2e-37).
// tests/test_fusion_host.py checks both against math.erfc on a dense sweep.
// max.NaN keeps NaN inputs NaN; gelu(+inf) = +inf; gelu(-inf) = 0 (the limit; torch gives NaN).
#define GELU_POLY_A_MAX 13.0f

__device__ __forceinline__ float log2_phi_neg(float a) {    // Q(a), a in [0, GELU_POLY_A_MAX]
    float p = -2.012394917e-09f;
    p = fmaf(p, a, 1.452877285e-07f);
    p = fmaf(p, a, -4.617326340e-06f);
    p = fmaf(p, a, 8.553008229e-05f);
    p = fmaf(p, a, -1.034397632e-03f);
    p = fmaf(p, a, 8.723312058e-03f);
    p = fmaf(p, a, -5.408888310e-02f);
    p = fmaf(p, a, -4.586362839e-01f);
    p = fmaf(p, a, -1.151051044e+00f);
    p = fmaf(p, a, -1.000025749e+00f);
    return p;
}

__device__ __forceinline__ float gelu_poly(float v) {
    const float a = fminf(fabsf(v), GELU_POLY_A_MAX);          // one FMNMX with an |.| operand
    float e, r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(log2_phi_neg(a)));   // one MUFU.EX2, rel. err ~2^-22
    asm("max.NaN.f32 %0, %1, 0f00000000;" : "=f"(r) : "f"(v));             // sm_80+: NaN stays NaN
    return fmaf(-a, e, r);
}
// [[/snippet]]

// SiLU (swish): v * sigmoid(v) = v / (1 + e^-v); -inf-safe (e^-v = inf gives -0).
__device__ __forceinline__ float silu(float v) { return v / (1.0f + expf(-v)); }

// The residual stream is stored in bf16, so the norm sees the rounded sum (as torch and vLLM do).
__device__ __forceinline__ float add_round_bf16(unsigned short a, unsigned short b) {
    return bf16_bits_to_float(float_to_bf16_bits(bf16_bits_to_float(a) + bf16_bits_to_float(b)));
}

__device__ __forceinline__ float square(float v) { return v * v; }
