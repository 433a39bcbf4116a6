// int8_fp8.cu: INT8 per-channel and FP8 e4m3 per-tensor quantize / dequantize (chapter 9.2).
//   int8_quant_rowwise    one block per output channel (row of W [N, K]): amax, then q = rint(w * 127/amax)
//   int8_dequant_rowwise  w' = q * scale[n]
//   fp8_amax              amax of |x| over the whole tensor (grid-stride, atomicMax on the float's bits)
//   fp8_quant             q = e4m3(x * 448/amax), satfinite, round-to-nearest-even; writes scale = amax/448
//   fp8_dequant           x' = float(q) * scale
#include "quant_common.cuh"

// [[snippet: int8_quant]]
// W [N, K] bf16 (nn.Linear layout: row n = output channel n) -> q [N, K] int8, scale [N] fp32.
// scale[n] = amax_n / 127, q = rint(w * (127 / amax_n)) clamped to [-127, 127] (symmetric, no -128).
// One block of 256 threads per row; 16-byte loads (8 bf16) when K % 8 == 0, scalar otherwise.
extern "C" __global__ void __launch_bounds__(256) int8_quant_rowwise(
    const __nv_bfloat16* __restrict__ w, signed char* __restrict__ q, float* __restrict__ scale, int K) {
    __shared__ float red[8];
    const size_t row = blockIdx.x;
    const __nv_bfloat16* w_n = w + row * K;        // [K] this channel
    signed char* q_n = q + row * K;
    const bool vec = (K & 7) == 0;
    float amax = 0.f;
    if (vec) {
        for (int c = threadIdx.x; c < K / 8; c += blockDim.x) {
            uint4 v = __ldg(reinterpret_cast<const uint4*>(w_n) + c);
            unsigned u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int j = 0; j < 4; ++j) amax = fmaxf(amax, fmaxf(fabsf(bf16_lo(u[j])), fabsf(bf16_hi(u[j]))));
        }
    } else {
        for (int k = threadIdx.x; k < K; k += blockDim.x) amax = fmaxf(amax, fabsf(__bfloat162float(w_n[k])));
    }
    amax = block_max_256(amax, red);
    const float inv = amax > 0.f ? 127.f / amax : 0.f;   // IEEE division, as the reference
    if (threadIdx.x == 0) scale[row] = amax / 127.f;
    if (vec) {
        for (int c = threadIdx.x; c < K / 8; c += blockDim.x) {
            uint4 v = __ldg(reinterpret_cast<const uint4*>(w_n) + c);   // second read: L1/L2 hit
            unsigned u[4] = {v.x, v.y, v.z, v.w};
            unsigned packed[2] = {0u, 0u};
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                int a = max(-127, min(127, __float2int_rn(bf16_lo(u[j]) * inv)));
                int b = max(-127, min(127, __float2int_rn(bf16_hi(u[j]) * inv)));
                unsigned pair = (unsigned(a) & 0xffu) | ((unsigned(b) & 0xffu) << 8);
                packed[j >> 1] |= pair << ((j & 1) * 16);
            }
            reinterpret_cast<uint2*>(q_n)[c] = make_uint2(packed[0], packed[1]);
        }
    } else {
        for (int k = threadIdx.x; k < K; k += blockDim.x)
            q_n[k] = (signed char)max(-127, min(127, __float2int_rn(__bfloat162float(w_n[k]) * inv)));
    }
}

// q [N, K] int8, scale [N] fp32 -> W' [N, K] bf16 = q * scale[n].
extern "C" __global__ void __launch_bounds__(256) int8_dequant_rowwise(
    const signed char* __restrict__ q, const float* __restrict__ scale, __nv_bfloat16* __restrict__ w, int K) {
    const size_t row = blockIdx.x;
    const float s = scale[row];
    const signed char* q_n = q + row * K;
    __nv_bfloat16* w_n = w + row * K;
    if ((K & 7) == 0) {
        for (int c = threadIdx.x; c < K / 8; c += blockDim.x) {
            uint2 v = __ldg(reinterpret_cast<const uint2*>(q_n) + c);    // 8 int8
            unsigned u[2] = {v.x, v.y};
            unsigned o[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                int a = (int)(signed char)((u[j >> 1] >> ((j & 1) * 16)) & 0xff);
                int b = (int)(signed char)((u[j >> 1] >> ((j & 1) * 16 + 8)) & 0xff);
                o[j] = bf162_as_u32(__floats2bfloat162_rn(a * s, b * s));
            }
            reinterpret_cast<uint4*>(w_n)[c] = make_uint4(o[0], o[1], o[2], o[3]);
        }
    } else {
        for (int k = threadIdx.x; k < K; k += blockDim.x) w_n[k] = __float2bfloat16_rn(q_n[k] * s);
    }
}
// [[/snippet]]

// [[snippet: fp8_quant]]
// Per-tensor FP8 e4m3: amax over the tensor, then q = e4m3(x * 448 / amax) (448 = e4m3's largest
// finite value; satfinite, round to nearest even), scale = amax / 448 for the dequantization.
// amax_bits must be zero before fp8_amax runs; fp8_quant reads it, so no host round trip.
extern "C" __global__ void __launch_bounds__(256) fp8_amax(
    const __nv_bfloat16* __restrict__ x, unsigned* __restrict__ amax_bits, long long n) {
    __shared__ float red[8];
    float m = 0.f;
    const long long chunks = n / 8;              // 16-byte chunks of 8 bf16 (x is 16-byte aligned)
    for (long long c = blockIdx.x * (long long)blockDim.x + threadIdx.x; c < chunks;
         c += (long long)gridDim.x * blockDim.x) {
        uint4 v = __ldg(reinterpret_cast<const uint4*>(x) + c);
        unsigned u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) m = fmaxf(m, fmaxf(fabsf(bf16_lo(u[j])), fabsf(bf16_hi(u[j]))));
    }
    if (blockIdx.x == 0)                         // the last n % 8 elements
        for (long long i = chunks * 8 + threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, fabsf(__bfloat162float(x[i])));
    m = block_max_256(m, red);
    // For non-negative floats the order of the bit patterns as unsigned integers is the order of the values.
    if (threadIdx.x == 0) atomicMax(amax_bits, __float_as_uint(m));
}

extern "C" __global__ void __launch_bounds__(256) fp8_quant(
    const __nv_bfloat16* __restrict__ x, const unsigned* __restrict__ amax_bits,
    unsigned char* __restrict__ q, float* __restrict__ scale, long long n) {
    const float amax = __uint_as_float(*amax_bits);
    const float inv = amax > 0.f ? 448.f / amax : 0.f;
    const long long c = blockIdx.x * (long long)blockDim.x + threadIdx.x;    // one chunk of 8 per thread
    if (c == 0) *scale = amax / 448.f;
    if (c * 8 + 8 <= n) {
        uint4 v = __ldcs(reinterpret_cast<const uint4*>(x) + c);
        float4 a = make_float4(bf16_lo(v.x) * inv, bf16_hi(v.x) * inv, bf16_lo(v.y) * inv, bf16_hi(v.y) * inv);
        float4 b = make_float4(bf16_lo(v.z) * inv, bf16_hi(v.z) * inv, bf16_lo(v.w) * inv, bf16_hi(v.w) * inv);
        __nv_fp8x4_e4m3 qa(a), qb(b);            // cvt.rn.satfinite.e4m3x2.f32, two per instruction
        __stcs(reinterpret_cast<uint2*>(q) + c, make_uint2(qa.__x, qb.__x));
    } else {
        for (long long i = c * 8; i < n; ++i) {
            __nv_fp8_e4m3 v(__bfloat162float(x[i]) * inv);
            q[i] = v.__x;
        }
    }
}

extern "C" __global__ void __launch_bounds__(256) fp8_dequant(
    const unsigned char* __restrict__ q, const float* __restrict__ scale, __nv_bfloat16* __restrict__ x,
    long long n) {
    const float s = *scale;
    const long long c = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (c * 8 + 8 <= n) {
        uint2 v = __ldcs(reinterpret_cast<const uint2*>(q) + c);
        __nv_fp8x4_e4m3 qa, qb;
        qa.__x = v.x;
        qb.__x = v.y;
        float4 a = static_cast<float4>(qa), b = static_cast<float4>(qb);
        uint4 o = make_uint4(bf162_as_u32(__floats2bfloat162_rn(a.x * s, a.y * s)),
                             bf162_as_u32(__floats2bfloat162_rn(a.z * s, a.w * s)),
                             bf162_as_u32(__floats2bfloat162_rn(b.x * s, b.y * s)),
                             bf162_as_u32(__floats2bfloat162_rn(b.z * s, b.w * s)));
        __stcs(reinterpret_cast<uint4*>(x) + c, o);
    } else {
        for (long long i = c * 8; i < n; ++i) {
            __nv_fp8_e4m3 v;
            v.__x = q[i];
            x[i] = __float2bfloat16_rn(static_cast<float>(v) * s);
        }
    }
}
// [[/snippet]]
