// quant.cu: quantization kernels (chapter 9).
//
// INT8 per-channel (symmetric) and FP8 e4m3 (per-tensor scale), quantize and dequantize:
//   int8_quant_rowwise      one block per output channel (row of W [N, K]): amax, then q = rint(w * 127/amax)
//   int8_dequant_rowwise    w' = q * scale[n]
//   fp8_amax                amax of |x| over the whole tensor (grid-stride, atomicMax on the float's bits)
//   fp8_quant               q = e4m3(x * 448/amax), satfinite, round-to-nearest-even; writes scale = amax/448
//   fp8_dequant             x' = float(q) * scale
// INT4 -> bf16/fp16 conversion throughput (each thread converts its 32 nibbles `reps` times):
//   int4_convert_v0_naive               shift, mask, integer-to-bf16 conversion per nibble
//   int4_convert_v1_magic               lop3 magic number (128.0 in bf16) for two nibbles at once, prmt back to order
//   int4_convert_v2_magic_interleaved   v1 on AWQ's interleaved order: the pairs come out in order, no prmt
//   int4_convert_v3_magic_fp16          fp16 magic (1024.0), interleaved order, one shift per 8 nibbles
// W4A16 GEMV (batch 1), GPTQ layout: qweight int32 [K/8, N], qzeros int32 [K/128, N/8], scales bf16 [K/128, N]:
//   w4a16_gemv_v0_naive     32 columns x all K per block, 16-byte weight loads; nibble -> int -> float, fp32 FMA
//   w4a16_gemv_v1_magic     v0 with the magic-number conversion and bf16x2 math (4 products per fp32 add)
//   w4a16_gemv_v2_pipelined v1's arithmetic; weights, x, scales, zeros streamed by a STAGES-deep cp.async
//                           pipeline through smem; BN columns x a K split per CTA, deterministic split-K
//   w4a16_gemv_v3_ring      v1's layout and arithmetic; each thread streams its own rows through a private
//                           cp.async ring in smem (no barrier, no loads for ptxas to sink), ROWS x STAGES
// W4A16 tensor-core GEMM (Marlin-style, batch 1..64): weights shuffled offline into mma B-fragment order
// (qmma int32 [N/16, K/64, 32 lanes, 4]), GPTQ qzeros, bf16 scales; A [M, K] bf16, C [M, N] bf16:
//   w4a16_mma_m16 / _m32    each lane dequantizes one int32 straight into the B fragments of two
//                           m16n8k16 tiles (lop3 magic, - (128 + z), * s); 8 warps split K by groups;
//                           next chunk's weights prefetched into registers; partial sums meet in smem
//   w4a16_marlin<MT,NTW,ST> the same fragments, Marlin's structure: one group per stage through a cp.async
//                           pipeline (weights, A, scales, zeros), A by ldmatrix from XOR-swizzled smem,
//                           all M rows per CTA (MT m16 tiles), split-K across CTAs (last CTA sums); each thread's
//                           copies of a stage are worked out once (MarlinCopies), not per stage
// W4A16 GEMV v4 (batch 1) on the shuffled weights: w4a16_gemv_v4_mma<NTW,WARPS> feeds the biased codes
// 128 + q to mma.sync (3 shifts + 4 lop3 + 2 HMMA per 8 weights), zero point and scale once per group
// W4A16 GEMV v5 (batch 1, GPTQ layout): w4a16_gemv_v5_split<BN,ROWS> v1's arithmetic on a split-K grid sized
//                           for whole waves of 4 CTAs per SM (<= 64 registers), each thread's ROWS weight loads
//                           issued before its math, deterministic last-CTA reduction
// W4A16 tensor-core GEMM v3: w4a16_marlin_v3_stripe<MT,NTW,ST> w4a16_marlin's stage and inner loop on a persistent
//                           grid (SMs x resident CTAs); (tile, group) units striped evenly over the CTAs, partial
//                           tiles summed in contributor order by the last to arrive
// W4A16 tensor-core GEMM v4: w4a16_marlin_v4_post<MT,NTW,ST> w4a16_marlin with GEMV v4's arithmetic: mma on the
//                           biased codes 128 + q, row sums of A by an mma against ones, zero point and scale
//                           applied per group and output element in fp32 (marlin_stage_post)
// W4A16 GEMV v6 (batch 1): w4a16_gemv_v6_tiled  v1 on a tiled copy of qweight (pack_gemv_tiled: each 32-column
//                           tile's K/8 rows back to back), so a block streams one contiguous range, not 1024
//                           128-byte pieces 4N bytes apart
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

// ---------------------------------------------------------------------------------------------------
// INT4 -> bf16 conversion throughput. packed: [n_vec] uint4 (4 words = 32 nibbles per thread);
// out: [n_vec * 32] bf16 (fp16 for v3) in logical element order; the first conversion is stored
// (checked), then `reps` more rounds on perturbed words are XOR-folded into a value that is written
// to `sink` only if it equals a sentinel, which keeps the work alive without touching `out`.
// ---------------------------------------------------------------------------------------------------

// [[snippet: int4_convert_v0]]
// Naive: for each nibble, shift, mask, convert the integer to bf16; pack two per word.
__device__ __forceinline__ void convert_naive(unsigned w, unsigned (&o)[4]) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        unsigned a = (w >> (8 * j)) & 0xfu;          // element 2j
        unsigned b = (w >> (8 * j + 4)) & 0xfu;      // element 2j + 1
        __nv_bfloat162 p = __halves2bfloat162(__uint2bfloat16_rn(a), __uint2bfloat16_rn(b));
        o[j] = bf162_as_u32(p);
    }
}
// [[/snippet]]

// [[snippet: int4_convert_v1]]
// Magic number, sequential (GPTQ) order: the lop3 pairs are (j, j+4); four prmt restore (0,1),(2,3),...
__device__ __forceinline__ void convert_magic_sequential(unsigned w, unsigned (&o)[4]) {
    unsigned b[4];
    int4x8_to_bf16x8_biased(w, b);
    const __nv_bfloat162 k128 = u32_as_bf162(BF16X2_MAGIC);
#pragma unroll
    for (int j = 0; j < 4; ++j) b[j] = bf162_as_u32(__hsub2(u32_as_bf162(b[j]), k128));   // exact q
    o[0] = __byte_perm(b[0], b[1], 0x5410);   // (q0, q1): low halves of b0, b1
    o[1] = __byte_perm(b[2], b[3], 0x5410);   // (q2, q3)
    o[2] = __byte_perm(b[0], b[1], 0x7632);   // (q4, q5): high halves
    o[3] = __byte_perm(b[2], b[3], 0x7632);   // (q6, q7)
}
// [[/snippet]]

// [[snippet: int4_convert_v2]]
// Magic number, AWQ's interleaved order: nibble i holds element {0,2,4,6,1,3,5,7}[i], so the lop3
// pair (i, i+4) is already the element pair (2i, 2i+1). No prmt.
__device__ __forceinline__ void convert_magic_interleaved(unsigned w, unsigned (&o)[4]) {
    unsigned b[4];
    int4x8_to_bf16x8_biased(w, b);
    const __nv_bfloat162 k128 = u32_as_bf162(BF16X2_MAGIC);
#pragma unroll
    for (int j = 0; j < 4; ++j) o[j] = bf162_as_u32(__hsub2(u32_as_bf162(b[j]), k128));
}
// [[/snippet]]

__device__ __forceinline__ void convert_magic_fp16_interleaved(unsigned w, unsigned (&o)[4]) {
    int4x8_to_fp16x8_magic(w, o);
}

// [[snippet: int4_convert_bench]]
#define INT4_CONVERT_KERNEL(NAME, CONVERT)                                                          \
    extern "C" __global__ void __launch_bounds__(256) NAME(                                         \
        const uint4* __restrict__ packed, uint4* __restrict__ out, unsigned* __restrict__ sink,     \
        int n_vec, int reps) {                                                                      \
        const int i = blockIdx.x * blockDim.x + threadIdx.x;                                        \
        if (i >= n_vec) return;                                                                     \
        const uint4 p = packed[i];                                                                  \
        unsigned w[4] = {p.x, p.y, p.z, p.w};                                                       \
        _Pragma("unroll") for (int j = 0; j < 4; ++j) {      /* the checked conversion */           \
            unsigned o[4];                                                                          \
            CONVERT(w[j], o);                                                                       \
            out[4 * (size_t)i + j] = make_uint4(o[0], o[1], o[2], o[3]);                            \
        }                                                                                           \
        unsigned acc[4] = {0u, 0u, 0u, 0u};                                                         \
        for (int r = 0; r < reps; ++r) {                     /* the timed conversions */            \
            _Pragma("unroll") for (int j = 0; j < 4; ++j) {                                         \
                w[j] += 0x9E3779B9u;                         /* new nibbles every round */          \
                unsigned o[4];                                                                      \
                CONVERT(w[j], o);                                                                   \
                acc[j] ^= o[0] ^ o[1] ^ o[2] ^ o[3];                                                \
            }                                                                                       \
        }                                                                                           \
        const unsigned all = acc[0] ^ acc[1] ^ acc[2] ^ acc[3];                                     \
        if (all == 0x7fc17fc1u) sink[0] = all;               /* practically never; keeps acc live */ \
    }

INT4_CONVERT_KERNEL(int4_convert_v0_naive, convert_naive)
INT4_CONVERT_KERNEL(int4_convert_v1_magic, convert_magic_sequential)
INT4_CONVERT_KERNEL(int4_convert_v2_magic_interleaved, convert_magic_interleaved)
INT4_CONVERT_KERNEL(int4_convert_v3_magic_fp16, convert_magic_fp16_interleaved)
// [[/snippet]]

// ---------------------------------------------------------------------------------------------------
// W4A16 GEMV: out[n] = sum_k x[k] * (q[k, n] - z[k / 128, n]) * s[k / 128, n], batch 1.
// GPTQ layout: qweight [K/8, N] int32, nibble i of qweight[r, n] = q[8r + i, n];
// qzeros [K/128, N/8] int32, nibble i of qzeros[g, c] = z[g, 8c + i]; scales [K/128, N] bf16.
// Block: 256 threads = 32 K-slices x 8 column lanes; a lane owns 4 adjacent columns (one uint4 of a
// qweight row), a block owns 32 columns and all of K; K-slice t takes groups t, t + 32, t + 64, ...
// Partial sums of the 32 K-slices meet in shared memory. Requires K % 128 == 0 and N % 8 == 0.
// ---------------------------------------------------------------------------------------------------
#define GEMV_THREADS 256
#define GEMV_COLS 32                   // 8 lanes x 4 columns
#define GEMV_KSLICES (GEMV_THREADS / 8)
#define GROUP 128
#define ROWS_PER_GROUP (GROUP / 8)     // 16 qweight rows of 8 k each

// Sum over the 32 K-slices and store 32 outputs (shared by both versions).
__device__ __forceinline__ void gemv_reduce_store(float (&acc)[4], __nv_bfloat16* __restrict__ out, int N) {
    __shared__ float red[GEMV_KSLICES][GEMV_COLS + 1];     // [32 K-slices, 32 columns (+1 pad)]
    const int lane_c = threadIdx.x & 7, ks = threadIdx.x >> 3;
#pragma unroll
    for (int c = 0; c < 4; ++c) red[ks][lane_c * 4 + c] = acc[c];
    __syncthreads();
    if (threadIdx.x < GEMV_COLS) {
        float sum = 0.f;
#pragma unroll 8
        for (int s = 0; s < GEMV_KSLICES; ++s) sum += red[s][threadIdx.x];
        const int col = blockIdx.x * GEMV_COLS + threadIdx.x;
        if (col < N) out[col] = __float2bfloat16_rn(sum);
    }
}

// acc[c] += gacc[c] * s[c] for the 4 columns of a lane: one group's sum, scaled once (sv = 4 bf16 scales).
__device__ __forceinline__ void gemv_apply_scales(const float (&gacc)[4], uint2 sv, float (&acc)[4]) {
    acc[0] = fmaf(gacc[0], bf16_lo(sv.x), acc[0]);
    acc[1] = fmaf(gacc[1], bf16_hi(sv.x), acc[1]);
    acc[2] = fmaf(gacc[2], bf16_lo(sv.y), acc[2]);
    acc[3] = fmaf(gacc[3], bf16_hi(sv.y), acc[3]);
}

// [[snippet: w4a16_gemv_v0]]
extern "C" __global__ void __launch_bounds__(GEMV_THREADS, 2) w4a16_gemv_v0_naive(
    const uint4* __restrict__ qweight,          // [K/8, N/4] uint4 = [K/8, N] int32
    const unsigned* __restrict__ qzeros,        // [K/128, N/8]
    const __nv_bfloat16* __restrict__ scales,   // [K/128, N]
    const __nv_bfloat16* __restrict__ x,        // [K]
    __nv_bfloat16* __restrict__ out,            // [N]
    int K, int N) {
    const int lane_c = threadIdx.x & 7, ks = threadIdx.x >> 3;
    const int n = blockIdx.x * GEMV_COLS + lane_c * 4;      // this lane's columns n .. n+3
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    if (n < N) {                                            // N % 8 == 0: n < N implies n + 3 < N
        const int groups = K / GROUP;
        for (int g = ks; g < groups; g += GEMV_KSLICES) {
            const unsigned zw = qzeros[(size_t)g * (N / 8) + (n >> 3)] >> ((n & 7) * 4);   // z[g, n..n+3]
            const uint2 sv = *reinterpret_cast<const uint2*>(scales + (size_t)g * N + n);     // s[g, n..n+3]
            float z[4], gacc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
            for (int c = 0; c < 4; ++c) z[c] = float((zw >> (4 * c)) & 0xfu);
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int r0 = g * ROWS_PER_GROUP + half * 8;
                uint4 wv[8];                                // [8 rows, 4 columns] int32 in registers
#pragma unroll
                for (int r = 0; r < 8; ++r) wv[r] = __ldcs(qweight + (size_t)(r0 + r) * (N / 4) + (n >> 2));
#pragma unroll
                for (int r = 0; r < 8; ++r) {
                    const uint4 xv = __ldg(reinterpret_cast<const uint4*>(x) + r0 + r);      // x[8(r0+r) .. +7]
                    const float xf[8] = {bf16_lo(xv.x), bf16_hi(xv.x), bf16_lo(xv.y), bf16_hi(xv.y),
                                         bf16_lo(xv.z), bf16_hi(xv.z), bf16_lo(xv.w), bf16_hi(xv.w)};
                    const unsigned wc[4] = {wv[r].x, wv[r].y, wv[r].z, wv[r].w};
#pragma unroll
                    for (int c = 0; c < 4; ++c)
#pragma unroll
                        for (int i = 0; i < 8; ++i)
                            gacc[c] = fmaf(float((wc[c] >> (4 * i)) & 0xfu) - z[c], xf[i], gacc[c]);
                }
            }
            gemv_apply_scales(gacc, sv, acc);
        }
    }
    gemv_reduce_store(acc, out, N);
}
// [[/snippet]]

// [[snippet: w4a16_gemv_row]]
// One qweight row of 4 columns (uint4: 4 int32 = 4 columns x 8 k) against its 8 activations:
// gacc[c] += sum_j x_j (q_jc - z_c). The lop3 pairs are (j, j+4), so x is paired the same way
// (4 prmt, shared by the 4 columns); 4 products are summed in bf16x2, then the sum goes to fp32.
__device__ __forceinline__ void gemv_dot_row(uint4 wv, uint4 xv, const __nv_bfloat162 (&zb)[4], float (&gacc)[4]) {
    const __nv_bfloat162 xp[4] = {u32_as_bf162(__byte_perm(xv.x, xv.z, 0x5410)),   // (x0, x4)
                                  u32_as_bf162(__byte_perm(xv.x, xv.z, 0x7632)),   // (x1, x5)
                                  u32_as_bf162(__byte_perm(xv.y, xv.w, 0x5410)),   // (x2, x6)
                                  u32_as_bf162(__byte_perm(xv.y, xv.w, 0x7632))};  // (x3, x7)
    const unsigned wc[4] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
    for (int c = 0; c < 4; ++c) {
        unsigned b[4];
        int4x8_to_bf16x8_biased(wc[c], b);                  // (128+q_j, 128+q_{j+4})
        __nv_bfloat162 p = __hmul2(__hsub2(u32_as_bf162(b[0]), zb[c]), xp[0]);
        p = __hfma2(__hsub2(u32_as_bf162(b[1]), zb[c]), xp[1], p);
        p = __hfma2(__hsub2(u32_as_bf162(b[2]), zb[c]), xp[2], p);
        p = __hfma2(__hsub2(u32_as_bf162(b[3]), zb[c]), xp[3], p);
        const unsigned pu = bf162_as_u32(p);                // 2 sums of 4 products
        gacc[c] += bf16_lo(pu) + bf16_hi(pu);               // fp32 from here on
    }
}
// [[/snippet]]

// [[snippet: w4a16_gemv_v1]]
// The body of v1 (and of v6, which only changes where the weights live): w points at this lane's uint4
// of qweight row 0 (k = 0..7), and the uint4 of row r is r * row_stride further (N / 4 in GPTQ's layout).
__device__ __forceinline__ void gemv_magic(const uint4* __restrict__ w, size_t row_stride,
                                           const unsigned* __restrict__ qzeros,
                                           const __nv_bfloat16* __restrict__ scales,
                                           const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ out,
                                           int K, int N) {
    const int lane_c = threadIdx.x & 7, ks = threadIdx.x >> 3;
    const int n = blockIdx.x * GEMV_COLS + lane_c * 4;
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    if (n < N) {
        const int groups = K / GROUP;
        for (int g = ks; g < groups; g += GEMV_KSLICES) {
            const unsigned zw = qzeros[(size_t)g * (N / 8) + (n >> 3)] >> ((n & 7) * 4);
            const uint2 sv = *reinterpret_cast<const uint2*>(scales + (size_t)g * N + n);
            __nv_bfloat162 zb[4];                       // (128 + z, 128 + z): subtracting it leaves q - z
            float gacc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
            for (int c = 0; c < 4; ++c) zb[c] = u32_as_bf162(bf16x2_biased_zero((zw >> (4 * c)) & 0xfu));
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int r0 = g * ROWS_PER_GROUP + half * 8;
                uint4 wv[8];
#pragma unroll
                for (int r = 0; r < 8; ++r) wv[r] = __ldcs(w + (size_t)(r0 + r) * row_stride);
#pragma unroll
                for (int r = 0; r < 8; ++r)
                    gemv_dot_row(wv[r], __ldg(reinterpret_cast<const uint4*>(x) + r0 + r), zb, gacc);
            }
            gemv_apply_scales(gacc, sv, acc);
        }
    }
    gemv_reduce_store(acc, out, N);
}

extern "C" __global__ void __launch_bounds__(GEMV_THREADS, 2) w4a16_gemv_v1_magic(
    const uint4* __restrict__ qweight,          // [K/8, N/4] uint4 = [K/8, N] int32
    const unsigned* __restrict__ qzeros,        // [K/128, N/8]
    const __nv_bfloat16* __restrict__ scales,   // [K/128, N]
    const __nv_bfloat16* __restrict__ x,        // [K]
    __nv_bfloat16* __restrict__ out,            // [N]
    int K, int N) {
    const int n = blockIdx.x * GEMV_COLS + (threadIdx.x & 7) * 4;
    gemv_magic(qweight + (n >> 2), N / 4, qzeros, scales, x, out, K, N);
}
// [[/snippet]]

// ---------------------------------------------------------------------------------------------------
// W4A16 tensor-core GEMM, Marlin-style: C [M, N] = A [M, K] @ dequant(W), M up to 64 (grid.y over 32 rows).
// qmma [N/16, K/64, 32, 4] int32: word j of lane l = (g, t) for n16 tile nt and k64 chunk kc covers the
// k16 tile kt = 4 kc + j; its nibbles i = 0..7 hold W[16 kt + dk_i][16 nt + dn_i] with
//   dk = (2t, 2t+8, 2t, 2t+8, 2t+1, 2t+9, 2t+1, 2t+9),  dn = (g, g, g+8, g+8, g, g, g+8, g+8),
// so the lop3 pairs (i, i+4) are exactly the B registers b0, b1 of the n8 tiles at columns g and g + 8.
// Block: 256 threads = 8 warps, 64 columns (4 n16 tiles) x MT m16 tiles; warp w takes groups w, w + 8, ...
// Requires K % 128 == 0 and N % 16 == 0.
// ---------------------------------------------------------------------------------------------------
#define TC_WARPS 8
#define TC_NT 4                        // n16 tiles per block

// [[snippet: w4a16_dequant_frags]]
// One shuffled int32 -> the B fragments of two m16n8k16 tiles: b[0], b[1] (= b0, b1) of the n8 tile
// at column g, b[2], b[3] of the one at column g + 8 (see pack_mma). lop3 gives 128 + q exactly,
// hsub2 with (128 + z) leaves q - z exactly, hmul2 with s rounds once: the same bf16 as
// "dequantize to bf16, then multiply". 3 shifts + 4 lop3 + 4 hsub2 + 4 hmul2 for 8 weights.
__device__ __forceinline__ void dequant_b_frags(unsigned w, const __nv_bfloat162 (&zb)[2],
                                                const __nv_bfloat162 (&sb)[2], unsigned (&b)[4]) {
    int4x8_to_bf16x8_biased(w, b);
#pragma unroll
    for (int i = 0; i < 4; ++i)
        b[i] = bf162_as_u32(__hmul2(__hsub2(u32_as_bf162(b[i]), zb[i >> 1]), sb[i >> 1]));
}

// One n16 tile for one k16 step: dequantize the lane's word once, use it against every m16 tile of A.
template <int MT, int NT>
__device__ __forceinline__ void dequant_mma_n16(unsigned w, const __nv_bfloat162 (&zb)[2], const __nv_bfloat162 (&sb)[2],
                                                const unsigned (&a)[MT][4], float (&acc)[MT][NT][2][4], int nt) {
    unsigned b[4];
    dequant_b_frags(w, zb, sb, b);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        mma_m16n8k16_bf16(acc[mt][nt][0], a[mt], b[0], b[1]);   // n8 tile at column g
        mma_m16n8k16_bf16(acc[mt][nt][1], a[mt], b[2], b[3]);   // n8 tile at column g + 8
    }
}
// [[/snippet]]

// [[snippet: w4a16_mma]]
template <int MT>
__device__ __forceinline__ void w4a16_mma_body(
    const uint4* __restrict__ qmma,             // [N/16, K/64, 32, 4] int32 as [N/16, K/64, 32] uint4
    const unsigned* __restrict__ qzeros,        // [K/128, N/8]
    const __nv_bfloat16* __restrict__ scales,   // [K/128, N]
    const __nv_bfloat16* __restrict__ A,        // [M, K]
    __nv_bfloat16* __restrict__ C,              // [M, N]
    int M, int K, int N) {
    __shared__ float red[MT * 16][TC_NT * 16];  // [32 rows, 64 columns] fp32: the warps' sum
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int nt0 = blockIdx.x * TC_NT;         // first n16 tile of this block
    const int m0 = blockIdx.y * 16 * MT;        // first row of this block
    const int ntiles = N / 16, kchunks = K / 64, groups = K / GROUP;
    for (int i = threadIdx.x; i < MT * 16 * TC_NT * 16; i += blockDim.x) (&red[0][0])[i] = 0.f;

    float acc[MT][TC_NT][2][4];                 // [m16 tile][n16 tile][n8 half][fragment]
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < TC_NT; ++nt)
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[mt][nt][h][e] = 0.f;

#define LOAD_CHUNK(KC, WQ)                                                                           \
    _Pragma("unroll") for (int nt = 0; nt < TC_NT; ++nt)                                             \
        WQ[nt] = (nt0 + nt < ntiles) ? __ldcs(qmma + ((size_t)(nt0 + nt) * kchunks + (KC)) * 32 + lane) \
                                     : make_uint4(0u, 0u, 0u, 0u);
    uint4 wq[TC_NT], wq_next[TC_NT];                  // [4 n16 tiles] x 4 k16 words, this chunk and the next
    if (warp < groups) { LOAD_CHUNK(2 * warp, wq) }

    for (int grp = warp; grp < groups; grp += TC_WARPS) {
        // (s, s) and (128 + z, 128 + z) of this lane's columns g and g + 8 in each n16 tile
        __nv_bfloat162 sb[TC_NT][2], zb[TC_NT][2];
#pragma unroll
        for (int nt = 0; nt < TC_NT; ++nt) {
            const int n16 = min(nt0 + nt, ntiles - 1);   // clamped in bounds; tiles past N are never stored
            const int ca = n16 * 16 + g;
            const __nv_bfloat16 sa = scales[(size_t)grp * N + ca], sc = scales[(size_t)grp * N + ca + 8];
            sb[nt][0] = __halves2bfloat162(sa, sa);
            sb[nt][1] = __halves2bfloat162(sc, sc);
            const unsigned zw0 = qzeros[(size_t)grp * (N / 8) + 2 * n16];       // z of columns 16 n16 .. +7
            const unsigned zw1 = qzeros[(size_t)grp * (N / 8) + 2 * n16 + 1];   // z of columns 16 n16 + 8 .. +15
            zb[nt][0] = u32_as_bf162(bf16x2_biased_zero((zw0 >> (4 * g)) & 0xfu));
            zb[nt][1] = u32_as_bf162(bf16x2_biased_zero((zw1 >> (4 * g)) & 0xfu));
        }
#pragma unroll
        for (int half = 0; half < 2; ++half) {                   // the two k64 chunks of the group
            const int kc = 2 * grp + half;
            const int kc_next = half == 0 ? kc + 1 : kc + 2 * TC_WARPS - 1;
            if (kc_next < kchunks) { LOAD_CHUNK(kc_next, wq_next) }   // prefetch while this chunk computes
#pragma unroll
            for (int j = 0; j < 4; ++j) {                        // k16 tiles of the chunk
                const int k0 = kc * 64 + j * 16;
                unsigned a[MT][4];                               // A fragments, rows beyond M read as 0
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    const int r0 = m0 + mt * 16 + g, r1 = r0 + 8;
                    const unsigned* A0 = reinterpret_cast<const unsigned*>(A + (size_t)min(r0, M - 1) * K + k0 + 2 * t);
                    const unsigned* A1 = reinterpret_cast<const unsigned*>(A + (size_t)min(r1, M - 1) * K + k0 + 2 * t);
                    a[mt][0] = r0 < M ? __ldg(A0) : 0u;
                    a[mt][1] = r1 < M ? __ldg(A1) : 0u;
                    a[mt][2] = r0 < M ? __ldg(A0 + 4) : 0u;              // + 8 bf16
                    a[mt][3] = r1 < M ? __ldg(A1 + 4) : 0u;
                }
#pragma unroll
                for (int nt = 0; nt < TC_NT; ++nt) {
                    const unsigned w = j == 0 ? wq[nt].x : j == 1 ? wq[nt].y : j == 2 ? wq[nt].z : wq[nt].w;
                    dequant_mma_n16(w, zb[nt], sb[nt], a, acc, nt);
                }
            }
#pragma unroll
            for (int nt = 0; nt < TC_NT; ++nt) wq[nt] = wq_next[nt];
        }
    }
    __syncthreads();                                             // red is zeroed
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < TC_NT; ++nt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int col = nt * 16 + h * 8 + 2 * t, row = mt * 16 + g;
                atomicAdd(&red[row][col], acc[mt][nt][h][0]);
                atomicAdd(&red[row][col + 1], acc[mt][nt][h][1]);
                atomicAdd(&red[row + 8][col], acc[mt][nt][h][2]);
                atomicAdd(&red[row + 8][col + 1], acc[mt][nt][h][3]);
            }
    __syncthreads();
    for (int i = threadIdx.x; i < MT * 16 * TC_NT * 16; i += blockDim.x) {
        const int row = i / (TC_NT * 16), col = i % (TC_NT * 16);
        const int m = m0 + row, n = nt0 * 16 + col;
        if (m < M && n < N) C[(size_t)m * N + n] = __float2bfloat16_rn(red[row][col]);
    }
}

extern "C" __global__ void __launch_bounds__(256, 1) w4a16_mma_m16(
    const uint4* __restrict__ qmma, const unsigned* __restrict__ qzeros, const __nv_bfloat16* __restrict__ scales,
    const __nv_bfloat16* __restrict__ A, __nv_bfloat16* __restrict__ C, int M, int K, int N) {
    w4a16_mma_body<1>(qmma, qzeros, scales, A, C, M, K, N);
}
extern "C" __global__ void __launch_bounds__(256, 1) w4a16_mma_m32(
    const uint4* __restrict__ qmma, const unsigned* __restrict__ qzeros, const __nv_bfloat16* __restrict__ scales,
    const __nv_bfloat16* __restrict__ A, __nv_bfloat16* __restrict__ C, int M, int K, int N) {
    w4a16_mma_body<2>(qmma, qzeros, scales, A, C, M, K, N);
}
// [[/snippet]]

// ---------------------------------------------------------------------------------------------------
// Split-K across CTAs, deterministic. Every split of a tile writes its fp32 partial sums to a
// workspace [splits, ...]; a counter per tile counts the splits that are done; the CTA that brings
// the count to `splits` sums the partials in split order (the same order whoever arrives last) and
// stores bf16. It also resets the counter, so the counters stay zero between launches on a stream.
// ---------------------------------------------------------------------------------------------------
// [[snippet: splitk_last_arrival]]
__device__ __forceinline__ bool splitk_last_arrival(unsigned* __restrict__ counter, int splits) {
    __shared__ int last;
    __threadfence();                         // this thread's partials reach L2 before the count does
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned done = atomicAdd(counter, 1u);
        last = done == unsigned(splits - 1);
        if (last) *counter = 0u;             // every other split has counted already
    }
    __syncthreads();
    return last;                             // the caller reads the partials with __ldcg (L2, never a stale L1)
}
// [[/snippet]]

// The GEMV's column sums, one per thread (`active` for the threads that own a column col < N): stored as
// bf16 when there is one split, else written to ws [splits, N]; the last split to arrive sums the partials
// in split order. Every thread of the CTA must call it (splitk_last_arrival has barriers).
__device__ __forceinline__ void gemv_splitk_store(float sum, bool active, int col, __nv_bfloat16* __restrict__ out,
                                                  float* __restrict__ ws, unsigned* __restrict__ counter, int split,
                                                  int splits, int N) {
    if (splits == 1) {
        if (active) out[col] = __float2bfloat16_rn(sum);
        return;
    }
    if (active) ws[(size_t)split * N + col] = sum;
    if (splitk_last_arrival(counter, splits) && active) {
        float total = 0.f;
        for (int s = 0; s < splits; ++s) total += __ldcg(ws + (size_t)s * N + col);
        out[col] = __float2bfloat16_rn(total);
    }
}

// ---------------------------------------------------------------------------------------------------
// W4A16 GEMV v2: the same GPTQ tensors and the same arithmetic as v1 (gemv_dot_row), but the
// weights are streamed through a STAGES-deep cp.async pipeline in shared memory, so the bytes in
// flight no longer depend on registers, and K is split across CTAs so that every SM holds 2+ CTAs.
// CTA tile: BN columns x the groups [g_begin, g_end) of its split. Stage = one group:
//   W [16 qweight rows, BN/4 uint4] | x [128] bf16 | scales [BN] bf16 | qzeros [BN/8] int32
// Thread (rb, quad) = (tid / (BN/4), tid % (BN/4)) owns columns 4 quad .. 4 quad + 3 and the
// qweight rows rb, rb + 256/(BN/4), ... of every stage; its partial sums meet the other rb's in smem.
// Requires K % 128 == 0 and N % 8 == 0 (as v1).
// ---------------------------------------------------------------------------------------------------
template <int BN>
struct GemvStage {
    static constexpr int QUADS = BN / 4;                         // uint4 (4 columns) per qweight row
    static constexpr int W_BYTES = ROWS_PER_GROUP * BN * 4;      // [16, BN] int32
    static constexpr int X_BYTES = GROUP * 2;                    // [128] bf16
    static constexpr int S_BYTES = BN * 2;                       // [BN] bf16
    static constexpr int Z_BYTES = BN / 2;                       // [BN/8] int32
    static constexpr int BYTES = W_BYTES + X_BYTES + S_BYTES + Z_BYTES;
};

// Issue the cp.async of group g into one stage; columns past N are zero-filled.
template <int BN>
__device__ __forceinline__ void gemv_load_stage(unsigned char* st, int g, int n0, int N,
                                                const uint4* __restrict__ qweight, const unsigned* __restrict__ qzeros,
                                                const __nv_bfloat16* __restrict__ scales,
                                                const __nv_bfloat16* __restrict__ x) {
    using S = GemvStage<BN>;
    uint4* sw = reinterpret_cast<uint4*>(st);                    // [16 rows][QUADS]
    for (int i = threadIdx.x; i < ROWS_PER_GROUP * S::QUADS; i += GEMV_THREADS) {
        const int r = i / S::QUADS, c4 = n0 / 4 + i % S::QUADS;
        const bool ok = c4 < N / 4;
        cp_async16(sw + i, qweight + (size_t)(g * ROWS_PER_GROUP + r) * (N / 4) + (ok ? c4 : 0), ok ? 16 : 0);
    }
    const int t = threadIdx.x;
    if (t < S::X_BYTES / 16) {
        cp_async16(st + S::W_BYTES + 16 * t, x + g * GROUP + 8 * t);
    } else if (t < S::X_BYTES / 16 + S::S_BYTES / 16) {
        const int c = t - S::X_BYTES / 16, col = n0 + 8 * c;     // 8 scales per 16 bytes
        const bool ok = col < N;
        cp_async16(st + S::W_BYTES + S::X_BYTES + 16 * c, scales + (size_t)g * N + (ok ? col : 0), ok ? 16 : 0);
    } else if (t < S::X_BYTES / 16 + S::S_BYTES / 16 + S::Z_BYTES / 4) {
        // one word per thread: a qzeros row (N/8 words) starts 16-byte aligned only when N % 32 == 0
        const int c = t - S::X_BYTES / 16 - S::S_BYTES / 16, word = n0 / 8 + c;
        const bool ok = word < N / 8;
        cp_async4(st + S::W_BYTES + S::X_BYTES + S::S_BYTES + 4 * c, qzeros + (size_t)g * (N / 8) + (ok ? word : 0),
                  ok ? 4 : 0);
    }
}

// [[snippet: w4a16_gemv_v2]]
template <int BN, int STAGES>
__global__ void __launch_bounds__(GEMV_THREADS) w4a16_gemv_v2_pipelined(
    const uint4* __restrict__ qweight,          // [K/8, N/4] uint4 = [K/8, N] int32
    const unsigned* __restrict__ qzeros,        // [K/128, N/8]
    const __nv_bfloat16* __restrict__ scales,   // [K/128, N]
    const __nv_bfloat16* __restrict__ x,        // [K]
    __nv_bfloat16* __restrict__ out,            // [N]
    float* __restrict__ ws,                     // [splits, N] fp32 partial sums (splits > 1)
    unsigned* __restrict__ counters,            // [gridDim.x] zero between launches
    int K, int N) {
    using S = GemvStage<BN>;
    constexpr int ROW_THREADS = GEMV_THREADS / S::QUADS;          // threads sharing one column quad
    constexpr int ROWS_PER_THREAD = ROWS_PER_GROUP / ROW_THREADS;
    static_assert(ROWS_PER_GROUP % ROW_THREADS == 0, "BN must be 64, 128 or 256");
    extern __shared__ __align__(16) unsigned char smem[];       // [STAGES][S::BYTES]
    const int n0 = blockIdx.x * BN, split = blockIdx.y, splits = gridDim.y;
    const int groups = K / GROUP;
    const int g_begin = (int)((long long)split * groups / splits);
    const int g_count = (int)((long long)(split + 1) * groups / splits) - g_begin;
    const int quad = threadIdx.x % S::QUADS, rb = threadIdx.x / S::QUADS;

    // prologue: STAGES - 1 groups in flight before any arithmetic
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < g_count) gemv_load_stage<BN>(smem + s * S::BYTES, g_begin + s, n0, N, qweight, qzeros, scales, x);
        cp_async_commit();                                       // empty groups keep the count uniform
    }
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    for (int i = 0; i < g_count; ++i) {
        cp_async_wait<STAGES - 2>();                             // group i has landed (this thread's part)
        __syncthreads();                                         // ... everyone's; slot (i-1) % STAGES is free
        const int nxt = i + STAGES - 1;
        if (nxt < g_count)
            gemv_load_stage<BN>(smem + (nxt % STAGES) * S::BYTES, g_begin + nxt, n0, N, qweight, qzeros, scales, x);
        cp_async_commit();

        const unsigned char* st = smem + (i % STAGES) * S::BYTES;
        const uint4* sw = reinterpret_cast<const uint4*>(st);
        const uint4* sx = reinterpret_cast<const uint4*>(st + S::W_BYTES);
        const uint2 sv = reinterpret_cast<const uint2*>(st + S::W_BYTES + S::X_BYTES)[quad];      // s of 4 columns
        const unsigned zw = reinterpret_cast<const unsigned*>(st + S::W_BYTES + S::X_BYTES + S::S_BYTES)[quad / 2]
                            >> ((quad & 1) * 16);                                                    // z of 4 columns
        __nv_bfloat162 zb[4];
#pragma unroll
        for (int c = 0; c < 4; ++c) zb[c] = u32_as_bf162(bf16x2_biased_zero((zw >> (4 * c)) & 0xfu));
        float gacc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int r = 0; r < ROWS_PER_THREAD; ++r) {
            const int row = rb + r * ROW_THREADS;                 // qweight row within the group
            gemv_dot_row(sw[row * S::QUADS + quad], sx[row], zb, gacc);
        }
        gemv_apply_scales(gacc, sv, acc);
    }
    cp_async_wait<0>();
    __syncthreads();                                             // stage memory is free: reuse it
    float* red = reinterpret_cast<float*>(smem);                 // [ROW_THREADS][BN]
#pragma unroll
    for (int c = 0; c < 4; ++c) red[rb * BN + 4 * quad + c] = acc[c];
    __syncthreads();
    const int col = n0 + threadIdx.x;
    float sum = 0.f;
    if (threadIdx.x < BN) {
#pragma unroll
        for (int r = 0; r < ROW_THREADS; ++r) sum += red[r * BN + threadIdx.x];
    }
    gemv_splitk_store(sum, threadIdx.x < BN && col < N, col, out, ws, counters + blockIdx.x, split, splits, N);
}
// [[/snippet]]

// ---------------------------------------------------------------------------------------------------
// W4A16 GEMV v3: v1's thread layout and arithmetic (8 column lanes x 32 K-slices, 32 columns and all K
// per CTA), but every thread streams its OWN weight rows through a private cp.async ring in smem.
// Why: v1's SASS shows ptxas issuing only ~4 of a thread's 8 weight loads before the first use (it
// sinks the rest next to their uses), so ~64 B per thread = ~32 KB per SM are in flight; v2's shared
// stages need a __syncthreads per group, so every warp waits for the slowest of the CTA's ~600 copies.
// Here the copies have no register destination that ptxas could sink, and a thread only ever reads
// the slots it filled itself, so cp.async.wait_group alone orders it: no barrier in the main loop.
// Stage = ROWS qweight rows (ROWS * 16 B per thread); STAGES - 1 stages stay in flight per thread,
// (STAGES - 1) * ROWS * 16 B * 512 threads per SM (ROWS = 8, STAGES = 3: 128 KB per SM).
// smem: ring [STAGES][ROWS][256 threads] uint4 (a warp reads 512 contiguous bytes: conflict-free),
// side [STAGES][256] uint4 = (4 scales, zero word) of the group, copied with the group's first stage.
// Requires K % 128 == 0 and N % 8 == 0 (as v1).
// ---------------------------------------------------------------------------------------------------
template <int ROWS>
__device__ __forceinline__ void gemv_v3_issue(uint4* slot, uint4* side, int r0, bool first_of_group, int g, int n,
                                              int N, const uint4* __restrict__ qweight,
                                              const unsigned* __restrict__ qzeros,
                                              const __nv_bfloat16* __restrict__ scales) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
        cp_async16(slot + r * GEMV_THREADS, qweight + (size_t)(r0 + r) * (N / 4) + (n >> 2));
    if (first_of_group) {
        cp_async8(side, scales + (size_t)g * N + n);                               // s[g, n .. n+3]
        cp_async4(reinterpret_cast<unsigned*>(side) + 2, qzeros + (size_t)g * (N / 8) + (n >> 3));   // z word
    }
}

// [[snippet: w4a16_gemv_v3]]
template <int ROWS, int STAGES>
__global__ void __launch_bounds__(GEMV_THREADS, 2) w4a16_gemv_v3_ring(
    const uint4* __restrict__ qweight,          // [K/8, N/4] uint4 = [K/8, N] int32
    const unsigned* __restrict__ qzeros,        // [K/128, N/8]
    const __nv_bfloat16* __restrict__ scales,   // [K/128, N]
    const __nv_bfloat16* __restrict__ x,        // [K]
    __nv_bfloat16* __restrict__ out,            // [N]
    int K, int N) {
    constexpr int PER_GROUP = ROWS_PER_GROUP / ROWS;             // stages per group of 128 k
    static_assert(ROWS_PER_GROUP % ROWS == 0, "ROWS must divide 16");
    extern __shared__ __align__(16) unsigned char smem[];
    uint4* ring = reinterpret_cast<uint4*>(smem) + threadIdx.x;                      // [STAGES][ROWS][256]
    uint4* side = reinterpret_cast<uint4*>(smem) + STAGES * ROWS * GEMV_THREADS + threadIdx.x;   // [STAGES][256]
    const int lane_c = threadIdx.x & 7, ks = threadIdx.x >> 3;
    const int n = blockIdx.x * GEMV_COLS + lane_c * 4;           // this thread's columns n .. n+3
    const int groups = K / GROUP;
    const int my_groups = n < N ? (groups - ks + GEMV_KSLICES - 1) / GEMV_KSLICES : 0;   // groups ks, ks+32, ...
    const int n_stages = my_groups * PER_GROUP;
    auto issue = [&](int st) {                                   // stage st -> slot st % STAGES
        if (st < n_stages) {
            const int g = ks + (st / PER_GROUP) * GEMV_KSLICES, h = st % PER_GROUP;
            gemv_v3_issue<ROWS>(ring + (st % STAGES) * ROWS * GEMV_THREADS, side + (st % STAGES) * GEMV_THREADS,
                                g * ROWS_PER_GROUP + h * ROWS, h == 0, g, n, N, qweight, qzeros, scales);
        }
        cp_async_commit();                                       // empty groups keep the count uniform
    };
#pragma unroll
    for (int st = 0; st < STAGES - 1; ++st) issue(st);

    float acc[4] = {0.f, 0.f, 0.f, 0.f}, gacc[4] = {0.f, 0.f, 0.f, 0.f};
    __nv_bfloat162 zb[4];
    uint2 sv = make_uint2(0u, 0u);
    for (int st = 0; st < n_stages; ++st) {
        issue(st + STAGES - 1);                                  // refill the slot consumed last iteration
        cp_async_wait<STAGES - 1>();                             // this thread's stage st has landed
        const int g = ks + (st / PER_GROUP) * GEMV_KSLICES, h = st % PER_GROUP;
        const uint4* slot = ring + (st % STAGES) * ROWS * GEMV_THREADS;
        if (h == 0) {
            const uint4 sd = side[(st % STAGES) * GEMV_THREADS];
            sv = make_uint2(sd.x, sd.y);
            const unsigned zw = sd.z >> ((n & 7) * 4);
#pragma unroll
            for (int c = 0; c < 4; ++c) {
                zb[c] = u32_as_bf162(bf16x2_biased_zero((zw >> (4 * c)) & 0xfu));
                gacc[c] = 0.f;
            }
        }
        const int r0 = g * ROWS_PER_GROUP + h * ROWS;
#pragma unroll
        for (int r = 0; r < ROWS; ++r)
            gemv_dot_row(slot[r * GEMV_THREADS], __ldg(reinterpret_cast<const uint4*>(x) + r0 + r), zb, gacc);
        if (h == PER_GROUP - 1) {
            gemv_apply_scales(gacc, sv, acc);
        }
    }
    cp_async_wait<0>();                                          // only empty groups remain; leave none behind
    gemv_reduce_store(acc, out, N);
}
// [[/snippet]]

// ---------------------------------------------------------------------------------------------------
// W4A16 tensor-core GEMM v2, Marlin's structure: C [M, N] = A [M, K] @ dequant(W), M <= 64.
// Weights: the same offline shuffle as w4a16_mma (qmma [N/16, K/64, 32, 4]: a lane's 16 bytes are its
// B fragments for 4 k16 steps); GPTQ qzeros; bf16 scales.
// CTA: 8 warps, BN = 128 NTW columns (warp w owns n16 tiles w NTW .. w NTW + NTW - 1), all M rows
// (MT m16 tiles, zero rows past M), the groups [g_begin, g_end) of its K split.
// Stage = one group (k128), streamed by cp.async, STAGES deep:
//   W [NT_CTA n16 tiles][2 k64][32 lanes] uint4 | A [16 MT rows][128] bf16, 16-byte chunks XOR-swizzled
//   by row % 8 so that ldmatrix is conflict-free | scales [BN] bf16 | qzeros [BN/8] int32
// Inner loop per k16 step: ldmatrix.x4 the A fragment of each m16 tile; dequantize each owned n16
// tile's word into B fragments (dequant_b_frags); 2 mma per (m16 tile, n16 tile). fp32 accumulators
// stay in registers across the whole K range; split-K partials meet as in the GEMV.
// Requires K % 128 == 0, N % 16 == 0, 1 <= M <= 16 MT.
// ---------------------------------------------------------------------------------------------------
template <int MT, int NTW>
struct MarlinStage {
    static constexpr int NT_CTA = 8 * NTW;                       // n16 tiles per CTA
    static constexpr int BN = 16 * NT_CTA;
    static constexpr int W_BYTES = NT_CTA * 1024;                // [NT_CTA][2][32] uint4
    static constexpr int A_BYTES = 16 * MT * GROUP * 2;          // [16 MT][128] bf16
    static constexpr int S_BYTES = BN * 2;
    static constexpr int Z_BYTES = BN / 2;
    static constexpr int BYTES = W_BYTES + A_BYTES + S_BYTES + Z_BYTES;
};

// One thread's share of every stage, worked out once: which 16-byte pieces of W and A (and which scale
// chunk or zero word) it copies, and where they land. A stage of group g then costs each thread
// 2 NTW + MT + 1 cp.async at fixed offsets plus g times a stride. Run 1's version recomputed tile,
// row, chunk, swizzle and bounds for every copy of every stage inside generic loops: ~600 SASS
// instructions per warp per stage against ~40 for the 16 mma, which made the kernel issue-bound.
// [[snippet: marlin_copies]]
template <int MT, int NTW>
struct MarlinCopies {
    using S = MarlinStage<MT, NTW>;
    static constexpr int NW = S::NT_CTA * 64 / 256;             // W uint4 per thread: 2 NTW
    static constexpr int NA = 16 * MT * 16 / 256;                // A 16-byte chunks per thread: MT
    int w_src[NW];                                               // uint4 index into qmma at group 0
    bool w_ok[NW];
    int a_src[NA], a_dst[NA];                                    // element index into A at group 0, smem byte
    bool a_ok[NA];
    int side_src, side_dst;                                      // scales element / qzeros word at group 0
    int side_kind;                                               // 0 none, 1 eight scales, 2 one zero word

    __device__ __forceinline__ MarlinCopies(int nt0, int M, int K, int N) {
        const int ntiles = N / 16, kchunks = K / 64;
#pragma unroll
        for (int j = 0; j < NW; ++j) {                           // 1 KB contiguous per n16 tile and group
            const int i = threadIdx.x + 256 * j, tile = nt0 + i / 64;
            w_ok[j] = tile < ntiles;
            w_src[j] = (w_ok[j] ? tile : 0) * kchunks * 32 + i % 64;
        }
#pragma unroll
        for (int j = 0; j < NA; ++j) {                           // row r, 16-byte chunk c (8 k), XOR-swizzled
            const int i = threadIdx.x + 256 * j, r = i / 16, c = i % 16;
            a_ok[j] = r < M;
            a_src[j] = (a_ok[j] ? r : 0) * K + 8 * c;
            a_dst[j] = S::W_BYTES + r * 256 + ((c ^ (r & 7)) * 16);
        }
        const int t = threadIdx.x;
        side_kind = 0;
        side_src = side_dst = 0;
        if (t < S::S_BYTES / 16) {                               // 8 scales per 16 bytes
            const int col = nt0 * 16 + 8 * t;
            side_kind = col < N ? 1 : 3;                         // 3: past N, zero fill
            side_src = col < N ? col : 0;
            side_dst = S::W_BYTES + S::A_BYTES + 16 * t;
        } else if (t < S::S_BYTES / 16 + S::Z_BYTES / 4) {       // one word per thread: qzeros rows are
            const int c = t - S::S_BYTES / 16, word = nt0 * 2 + c;   // 16-byte aligned only if N % 32 == 0
            side_kind = word < N / 8 ? 2 : 4;
            side_src = word < N / 8 ? word : 0;
            side_dst = S::W_BYTES + S::A_BYTES + S::S_BYTES + 4 * c;
        }
    }

    __device__ __forceinline__ void issue(unsigned char* st, int g, int K, int N, const uint4* __restrict__ qmma,
                                          const unsigned* __restrict__ qzeros, const __nv_bfloat16* __restrict__ scales,
                                          const __nv_bfloat16* __restrict__ A) const {
        uint4* sw = reinterpret_cast<uint4*>(st) + threadIdx.x;
#pragma unroll
        for (int j = 0; j < NW; ++j) cp_async16(sw + 256 * j, qmma + w_src[j] + g * 64, w_ok[j] ? 16 : 0);
#pragma unroll
        for (int j = 0; j < NA; ++j) cp_async16(st + a_dst[j], A + a_src[j] + g * GROUP, a_ok[j] ? 16 : 0);
        if (side_kind == 1 || side_kind == 3)
            cp_async16(st + side_dst, scales + (size_t)g * N + side_src, side_kind == 1 ? 16 : 0);
        else if (side_kind != 0)
            cp_async4(st + side_dst, qzeros + (size_t)g * (N / 8) + side_src, side_kind == 2 ? 4 : 0);
    }
};
// [[/snippet]]

// Visit the output pairs a lane owns: f(v0, v1, row, col) with the two accumulators of columns col, col + 1,
// for rows mt*16 + g + 8p < M and columns col0 + 16 j + 8 h < cols (col0 = the lane's first column).
template <int MT, int NTW, typename F>
__device__ __forceinline__ void marlin_for_each_rc(const float (&acc)[MT][NTW][2][4], int M, int cols, int col0,
                                                   int g, F&& f) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int j = 0; j < NTW; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int p = 0; p < 2; ++p) {
                    const int row = mt * 16 + g + 8 * p, col = col0 + 16 * j + 8 * h;
                    if (row < M && col < cols) f(acc[mt][j][h][2 * p], acc[mt][j][h][2 * p + 1], row, col);
                }
}

// The same with f(v0, v1, row * N + col), col0 = (first n16 tile of the warp) * 16 + 2t over all N columns.
template <int MT, int NTW, typename F>
__device__ __forceinline__ void marlin_for_each_pair(const float (&acc)[MT][NTW][2][4], int M, int N, int col0,
                                                     int g, F&& f) {
    marlin_for_each_rc(acc, M, N, col0, g, [&](float v0, float v1, int row, int col) { f(v0, v1, (size_t)row * N + col); });
}

// The warp's weight words for one k64 half of the stage's group: lane's uint4 of each owned n16 tile
// (one 32-bit word per k16 step), and the A fragments of one k16 step by ldmatrix from the swizzled rows.
template <int NTW>
__device__ __forceinline__ void marlin_w_words(const uint4* sw, int half, uint4 (&wq)[NTW]) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
    for (int j = 0; j < NTW; ++j) wq[j] = sw[((warp * NTW + j) * 2 + half) * 32 + lane];
}

template <int MT>
__device__ __forceinline__ void marlin_a_frags(const unsigned char* sa, int ks, unsigned (&a)[MT][4]) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {                            // row mt*16 + lane%16, k chunk 2 ks + lane/16
        const int r = mt * 16 + (lane & 15), c = 2 * ks + (lane >> 4);
        ldmatrix_x4(a[mt], sa + r * 256 + ((c ^ (r & 7)) * 16));
    }
}

// One stage (one group of the CTA's tile) into the accumulators: per k16 step, ldmatrix.x4 the A fragment
// of each m16 tile; dequantize each owned n16 tile's word into B fragments; 2 mma per (m16, n16) pair.
// [[snippet: marlin_stage]]
template <int MT, int NTW>
__device__ __forceinline__ void marlin_stage_mma(const unsigned char* st, float (&acc)[MT][NTW][2][4]) {
    using S = MarlinStage<MT, NTW>;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2;
    const uint4* sw = reinterpret_cast<const uint4*>(st);
    const unsigned char* sa = st + S::W_BYTES;
    const __nv_bfloat16* ss = reinterpret_cast<const __nv_bfloat16*>(st + S::W_BYTES + S::A_BYTES);
    const unsigned* sz = reinterpret_cast<const unsigned*>(st + S::W_BYTES + S::A_BYTES + S::S_BYTES);
    __nv_bfloat162 sb[NTW][2], zb[NTW][2];      // (s, s), (128 + z, 128 + z) of columns g and g + 8
#pragma unroll
    for (int j = 0; j < NTW; ++j) {
        const int ntl = warp * NTW + j;
        sb[j][0] = __bfloat162bfloat162(ss[16 * ntl + g]);
        sb[j][1] = __bfloat162bfloat162(ss[16 * ntl + g + 8]);
        zb[j][0] = u32_as_bf162(bf16x2_biased_zero((sz[2 * ntl] >> (4 * g)) & 0xfu));
        zb[j][1] = u32_as_bf162(bf16x2_biased_zero((sz[2 * ntl + 1] >> (4 * g)) & 0xfu));
    }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        uint4 wq[NTW];
        marlin_w_words<NTW>(sw, half, wq);
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
            unsigned a[MT][4];
            marlin_a_frags<MT>(sa, half * 4 + kk, a);            // k16 step half * 4 + kk of the group
#pragma unroll
            for (int j = 0; j < NTW; ++j) {
                const unsigned w = kk == 0 ? wq[j].x : kk == 1 ? wq[j].y : kk == 2 ? wq[j].z : wq[j].w;
                dequant_mma_n16(w, zb[j], sb[j], a, acc, j);
            }
        }
    }
}
// [[/snippet]]

// v4: v2's stage with GEMV v4's arithmetic: the mma takes the biased codes 128 + q as they come, one
// more mma against a B of ones gives the row sums of A, and per group and output element two FFMA apply
// the zero point and the scale: s (sum A (128 + q) - (128 + z) sum A) = s sum A (q - z), in fp32.
// Why: ncu on v2 at M = 16 (2026-11-29, H200) found 45% of issue slots busy with ~0.8 eligible warps per
// scheduler, stalls mostly "wait" (fixed-latency dependencies), barrier and short scoreboard, memory
// waits under 10%: too many dependent instructions per weight, of which v2 spends 4 HSUB2 + 4 HMUL2 per
// 8 weights on (q - z) s. Precision: the fp32 group sum is ~128x the result it is subtracted to, which
// costs ~7 of its 24 bits; what remains is far below the bf16 output's 8.
// [[snippet: marlin_stage_post]]
template <int MT, int NTW>
__device__ __forceinline__ void marlin_stage_post(const unsigned char* st, float (&acc)[MT][NTW][2][4]) {
    using S = MarlinStage<MT, NTW>;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, t = lane & 3;
    const uint4* sw = reinterpret_cast<const uint4*>(st);
    const unsigned char* sa = st + S::W_BYTES;
    const unsigned* ss = reinterpret_cast<const unsigned*>(st + S::W_BYTES + S::A_BYTES);   // bf16 pairs
    const unsigned* sz = reinterpret_cast<const unsigned*>(st + S::W_BYTES + S::A_BYTES + S::S_BYTES);
    float part[MT][NTW][2][4] = {};             // this group's sum_k A (128 + q), fp32
    float rs[MT][4] = {};                       // this group's row sums of A: [0], [1] row g; [2], [3] row g + 8
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        uint4 wq[NTW];
        marlin_w_words<NTW>(sw, half, wq);
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
            unsigned a[MT][4];
            marlin_a_frags<MT>(sa, half * 4 + kk, a);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) mma_m16n8k16_bf16(rs[mt], a[mt], BF16X2_ONE, BF16X2_ONE);
#pragma unroll
            for (int j = 0; j < NTW; ++j) {
                const unsigned w = kk == 0 ? wq[j].x : kk == 1 ? wq[j].y : kk == 2 ? wq[j].z : wq[j].w;
                unsigned b[4];
                int4x8_to_bf16x8_biased(w, b);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma_m16n8k16_bf16(part[mt][j][0], a[mt], b[0], b[1]);   // n8 tile at column g
                    mma_m16n8k16_bf16(part[mt][j][1], a[mt], b[2], b[3]);   // n8 tile at column g + 8
                }
            }
        }
    }
    // The lane's accumulators hold columns 8h + 2t, 8h + 2t + 1 of each n16 tile: their scales are one
    // bf16 pair, their zero points nibbles 2t, 2t + 1 of the tile's word h (GPTQ: nibble i = column i).
#pragma unroll
    for (int j = 0; j < NTW; ++j) {
        const int ntl = warp * NTW + j;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const float2 sc = __bfloat1622float2(u32_as_bf162(ss[8 * ntl + 4 * h + t]));
            const unsigned zw = sz[2 * ntl + h] >> (8 * t);
            const float z0 = 128.f + (float)(zw & 0xfu), z1 = 128.f + (float)((zw >> 4) & 0xfu);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int p = 0; p < 2; ++p) {
                    acc[mt][j][h][2 * p] = fmaf(sc.x, fmaf(-z0, rs[mt][2 * p], part[mt][j][h][2 * p]),
                                                acc[mt][j][h][2 * p]);
                    acc[mt][j][h][2 * p + 1] = fmaf(sc.y, fmaf(-z1, rs[mt][2 * p + 1], part[mt][j][h][2 * p + 1]),
                                                    acc[mt][j][h][2 * p + 1]);
                }
        }
    }
}
// [[/snippet]]

// The kernel body of v2 and v4 (they differ only in what a stage does with its group; POST: v4's
// marlin_stage_post, else marlin_stage_mma).
// [[snippet: w4a16_marlin]]
template <int MT, int NTW, int STAGES, bool POST>
__device__ __forceinline__ void marlin_body(
    const uint4* __restrict__ qmma,             // [N/16, K/64, 32] uint4
    const unsigned* __restrict__ qzeros,        // [K/128, N/8]
    const __nv_bfloat16* __restrict__ scales,   // [K/128, N]
    const __nv_bfloat16* __restrict__ A,        // [M, K]
    __nv_bfloat16* __restrict__ C,              // [M, N]
    float* __restrict__ ws,                     // [splits, M, N] fp32 partials (splits > 1)
    unsigned* __restrict__ counters,            // [gridDim.x] zero between launches
    int M, int K, int N) {
    using S = MarlinStage<MT, NTW>;
    extern __shared__ __align__(16) unsigned char smem[];       // [STAGES][S::BYTES]
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int nt0 = blockIdx.x * S::NT_CTA, split = blockIdx.y, splits = gridDim.y;
    const int groups = K / GROUP;
    const int g_begin = (int)((long long)split * groups / splits);
    const int g_count = (int)((long long)(split + 1) * groups / splits) - g_begin;
    const MarlinCopies<MT, NTW> copies(nt0, M, K, N);

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < g_count) copies.issue(smem + s * S::BYTES, g_begin + s, K, N, qmma, qzeros, scales, A);
        cp_async_commit();
    }
    float acc[MT][NTW][2][4] = {};              // [m16 tile][owned n16 tile][n8 half][fragment], fp32

    for (int i = 0; i < g_count; ++i) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        const int nxt = i + STAGES - 1;
        if (nxt < g_count)
            copies.issue(smem + (nxt % STAGES) * S::BYTES, g_begin + nxt, K, N, qmma, qzeros, scales, A);
        cp_async_commit();

        if constexpr (POST) marlin_stage_post<MT, NTW>(smem + (i % STAGES) * S::BYTES, acc);
        else marlin_stage_mma<MT, NTW>(smem + (i % STAGES) * S::BYTES, acc);
    }
    cp_async_wait<0>();

    // epilogue: lane (g, t) holds rows mt*16 + g (+8), columns 2t, 2t+1 of each n8 tile
    const int col0 = (nt0 + warp * NTW) * 16 + 2 * t;
    if (splits == 1) {
        marlin_for_each_pair(acc, M, N, col0, g, [&](float v0, float v1, size_t at) {
            *reinterpret_cast<__nv_bfloat162*>(C + at) = __floats2bfloat162_rn(v0, v1);
        });
        return;
    }
    float* part = ws + (size_t)split * M * N;
    marlin_for_each_pair(acc, M, N, col0, g, [&](float v0, float v1, size_t at) {
        *reinterpret_cast<float2*>(part + at) = make_float2(v0, v1);
    });
    if (!splitk_last_arrival(counters + blockIdx.x, splits)) return;
    marlin_for_each_pair(acc, M, N, col0, g, [&](float, float, size_t at) {
        float2 sum = make_float2(0.f, 0.f);
        for (int s = 0; s < splits; ++s) {                       // split order: deterministic
            const float2 v = __ldcg(reinterpret_cast<const float2*>(ws + (size_t)s * M * N + at));
            sum.x += v.x;
            sum.y += v.y;
        }
        *reinterpret_cast<__nv_bfloat162*>(C + at) = __floats2bfloat162_rn(sum.x, sum.y);
    });
}
// [[/snippet]]

template <int MT, int NTW, int STAGES>
__global__ void __launch_bounds__(256, 2) w4a16_marlin(   // 2 CTAs per SM: up to 128 registers
    const uint4* __restrict__ qmma, const unsigned* __restrict__ qzeros, const __nv_bfloat16* __restrict__ scales,
    const __nv_bfloat16* __restrict__ A, __nv_bfloat16* __restrict__ C, float* __restrict__ ws,
    unsigned* __restrict__ counters, int M, int K, int N) {
    marlin_body<MT, NTW, STAGES, false>(qmma, qzeros, scales, A, C, ws, counters, M, K, N);
}

// [[snippet: w4a16_marlin_v4]]
template <int MT, int NTW, int STAGES>
__global__ void __launch_bounds__(256, 2) w4a16_marlin_v4_post(   // v2 with marlin_stage_post
    const uint4* __restrict__ qmma, const unsigned* __restrict__ qzeros, const __nv_bfloat16* __restrict__ scales,
    const __nv_bfloat16* __restrict__ A, __nv_bfloat16* __restrict__ C, float* __restrict__ ws,
    unsigned* __restrict__ counters, int M, int K, int N) {
    marlin_body<MT, NTW, STAGES, true>(qmma, qzeros, scales, A, C, ws, counters, M, K, N);
}
// [[/snippet]]


// ---------------------------------------------------------------------------------------------------
// W4A16 GEMV v4: tensor cores for batch 1, fewer instructions per weight. Run 2 showed that more bytes
// in flight (v3) did not help v1; v1's SASS issues ~2.8 instructions per weight (per 8 weights: 3 shifts,
// 4 lop3, 4 zero subtractions, 4 bf16x2 FMAs, 2 unpacks and 2 fp32 adds; + x loads and prmt per row).
// v4 reads the Marlin-shuffled weights (qmma) and per 8 weights issues 3 shifts + 4 lop3 + 2 HMMA:
//  * the biased codes 128 + q go straight into the mma (no subtraction per weight); the zero point is
//    folded into one correction per group and column: sum_k x (q - z) = sum_k x (128 + q) - (128 + z) sum_k x,
//    where sum_k x comes from one more mma per k16 tile with B = 1 (shared by the warp's NTW tiles);
//  * the scale is applied once per group and column, in fp32, after the mma;
//  * the mma sums in fp32 (products of bf16 are exact), so the accuracy is better than v1's bf16x2 sums.
// Only row 0 of the m16 tile is real (A rows 1..15 are zero): 15/16 of each HMMA is wasted, which costs
// tensor-pipe time (~1 us per 8192 x 8192) but no extra instructions per weight.
// CTA: WARPS warps x NTW n16 tiles (16 NTW columns); warp w takes the groups [w G / WARPS, (w+1) G / WARPS).
// Weights are register double-buffered in batches of V4_BATCH groups (NTW x 2 V4_BATCH uint4 per lane).
// Register caps: 85 for NTW = 1 (64 spilled), 128 for NTW = 2.
// Requires K % 128 == 0 and N % 16 == 0 (the shuffle's tiles).
// ---------------------------------------------------------------------------------------------------
#define V4_BATCH 1                     // groups per register batch: 2 uint4 (32 B) per lane per n16 tile

template <int NTW>
__device__ __forceinline__ void gemv_v4_load(uint4 (&w)[NTW][2 * V4_BATCH], const uint4* const (&wp)[NTW],
                                             int grp, int g_end) {
#pragma unroll
    for (int i = 0; i < NTW; ++i)
#pragma unroll
        for (int c = 0; c < 2 * V4_BATCH; ++c) {
            const int kc = 2 * grp + c;                      // k64 chunk
            w[i][c] = kc < 2 * g_end ? __ldcs(wp[i] + (size_t)kc * 32) : make_uint4(0u, 0u, 0u, 0u);
        }
}

// [[snippet: w4a16_gemv_v4_group]]
// One group (128 k) of the warp's NTW n16 tiles: 8 k16 steps of mma on the biased codes, then per column
// acc += s * (sum x (128 + q) - (128 + z) sum x). w holds the group's two k64 chunks per tile.
template <int NTW>
__device__ __forceinline__ void gemv_v4_group(const uint4 (&w)[NTW][2], int grp, const __nv_bfloat16* __restrict__ x,
                                              const unsigned* __restrict__ qzeros, const __nv_bfloat16* __restrict__ scales,
                                              const int (&nt)[NTW], int N, float (&acc)[NTW][2][2]) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    float gacc[NTW][2][4], xs[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int i = 0; i < NTW; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int e = 0; e < 4; ++e) gacc[i][h][e] = 0.f;
    const unsigned* xw = reinterpret_cast<const unsigned*>(x + (size_t)grp * GROUP) + t;   // pairs (2t, 2t+1)
#pragma unroll
    for (int j = 0; j < 8; ++j) {                           // k16 steps
        unsigned a[4] = {0u, 0u, 0u, 0u};                   // A row g: only row 0 is x, the rest zero
        if (g == 0) { a[0] = __ldg(xw + 8 * j); a[2] = __ldg(xw + 8 * j + 4); }
        mma_m16n8k16_bf16(xs, a, BF16X2_ONE, BF16X2_ONE);   // xs[0] = xs[1] = sum of x over the step
#pragma unroll
        for (int i = 0; i < NTW; ++i) {
            const uint4 v = w[i][j >> 2];
            const unsigned word = (j & 3) == 0 ? v.x : (j & 3) == 1 ? v.y : (j & 3) == 2 ? v.z : v.w;
            unsigned b[4];
            int4x8_to_bf16x8_biased(word, b);               // 128 + q, exact; no zero subtraction
            mma_m16n8k16_bf16(gacc[i][0], a, b[0], b[1]);  // n8 tile at columns 0..7 of the n16 tile
            mma_m16n8k16_bf16(gacc[i][1], a, b[2], b[3]);  // columns 8..15
        }
    }
    if (g == 0) {                                           // lanes holding row 0: columns 2t, 2t + 1 of each n8 tile
#pragma unroll
        for (int i = 0; i < NTW; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int col = nt[i] * 16 + h * 8 + 2 * t;
                const unsigned zw = qzeros[(size_t)grp * (N / 8) + (col >> 3)] >> ((col & 7) * 4);
                const unsigned sv = *reinterpret_cast<const unsigned*>(scales + (size_t)grp * N + col);
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const float zb = 128.f + float((zw >> (4 * e)) & 0xfu);
                    const float d = fmaf(-zb, xs[0], gacc[i][h][e]);          // sum x (q - z), fp32
                    acc[i][h][e] = fmaf(e == 0 ? bf16_lo(sv) : bf16_hi(sv), d, acc[i][h][e]);
                }
            }
    }
}
// [[/snippet]]

// [[snippet: w4a16_gemv_v4]]
template <int NTW, int WARPS>
__global__ void __launch_bounds__(32 * WARPS, (NTW == 1 ? 768 : 512) / (32 * WARPS)) w4a16_gemv_v4_mma(
    const uint4* __restrict__ qmma,             // [N/16, K/64, 32, 4] int32 as [N/16, K/64, 32] uint4
    const unsigned* __restrict__ qzeros,        // [K/128, N/8]
    const __nv_bfloat16* __restrict__ scales,   // [K/128, N]
    const __nv_bfloat16* __restrict__ x,        // [K]
    __nv_bfloat16* __restrict__ out,            // [N]
    int K, int N) {
    __shared__ float red[WARPS][NTW * 16];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int ntiles = N / 16, kchunks = K / 64, groups = K / GROUP;
    const int g_begin = (int)((long long)warp * groups / WARPS);
    const int g_end = (int)((long long)(warp + 1) * groups / WARPS);
    int nt[NTW];
    const uint4* wp[NTW];
#pragma unroll
    for (int i = 0; i < NTW; ++i) {
        nt[i] = min((int)blockIdx.x * NTW + i, ntiles - 1);      // clamped in bounds; never stored twice
        wp[i] = qmma + (size_t)nt[i] * kchunks * 32 + lane;
    }
    float acc[NTW][2][2];
#pragma unroll
    for (int i = 0; i < NTW; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) acc[i][h][0] = acc[i][h][1] = 0.f;

    uint4 cur[NTW][2 * V4_BATCH], nxt[NTW][2 * V4_BATCH];
    if (g_begin < g_end) gemv_v4_load<NTW>(cur, wp, g_begin, g_end);
    for (int b0 = g_begin; b0 < g_end; b0 += V4_BATCH) {
        if (b0 + V4_BATCH < g_end) gemv_v4_load<NTW>(nxt, wp, b0 + V4_BATCH, g_end);   // in flight meanwhile
#pragma unroll
        for (int h = 0; h < V4_BATCH; ++h) {
            if (b0 + h < g_end) {
                uint4 wg[NTW][2];
#pragma unroll
                for (int i = 0; i < NTW; ++i) { wg[i][0] = cur[i][2 * h]; wg[i][1] = cur[i][2 * h + 1]; }
                gemv_v4_group<NTW>(wg, b0 + h, x, qzeros, scales, nt, N, acc);
            }
        }
#pragma unroll
        for (int i = 0; i < NTW; ++i)
#pragma unroll
            for (int c = 0; c < 2 * V4_BATCH; ++c) cur[i][c] = nxt[i][c];
    }
    if (g == 0) {
#pragma unroll
        for (int i = 0; i < NTW; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                red[warp][i * 16 + h * 8 + 2 * t] = acc[i][h][0];
                red[warp][i * 16 + h * 8 + 2 * t + 1] = acc[i][h][1];
            }
    }
    __syncthreads();
    if (threadIdx.x < NTW * 16) {
        float sum = 0.f;
#pragma unroll
        for (int w = 0; w < WARPS; ++w) sum += red[w][threadIdx.x];   // fixed order: deterministic
        const int tile = blockIdx.x * NTW + threadIdx.x / 16;
        if (tile < ntiles) out[tile * 16 + threadIdx.x % 16] = __float2bfloat16_rn(sum);
    }
}
// [[/snippet]]

// ---------------------------------------------------------------------------------------------------
// W4A16 GEMV v5: fill the chip. v1 runs 256 CTAs (N / 32) with 95 registers, 2 CTAs per SM: ~1 eligible
// warp per scheduler, and each thread works through only 2 groups, so the prologue, the block reduction
// and the tail of the single partial wave weigh heavily. v5 keeps v1's arithmetic (gemv_dot_row) and
// changes the shape of the work:
//  * CTA tile = BN columns x one K split (grid.y = splits), so the grid is tiles x splits CTAs and the
//    launcher picks splits for whole waves of 4 CTAs per SM; split-K partials meet deterministically
//    (splitk_last_arrival, as v2 and the Marlin GEMM);
//  * <= 64 registers (launch bounds 256 x 4): 32 warps per SM, 8 per scheduler;
//  * a thread takes blocks of ROWS qweight rows (one zero word and 4 scales per block) and issues all
//    ROWS 16-byte weight loads (ld.global.nc.L1::no_allocate, volatile so they stay ahead of the math)
//    before it converts any of them.
// Thread (rt, quad) = (tid / (BN/4), tid % (BN/4)): columns 4 quad .. 4 quad + 3, row blocks rt,
// rt + RT, ... of the split (RT = 256 / (BN/4) threads share a quad). Requires K % 128 == 0, N % 8 == 0.
// ---------------------------------------------------------------------------------------------------
// 16 bytes, read-only path, not allocated in L1 (each weight is read exactly once).
__device__ __forceinline__ uint4 ld_stream16(const uint4* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

// [[snippet: w4a16_gemv_v5]]
template <int BN, int ROWS>
__global__ void __launch_bounds__(GEMV_THREADS, 4) w4a16_gemv_v5_split(
    const uint4* __restrict__ qweight,          // [K/8, N/4] uint4 = [K/8, N] int32
    const unsigned* __restrict__ qzeros,        // [K/128, N/8]
    const __nv_bfloat16* __restrict__ scales,   // [K/128, N]
    const __nv_bfloat16* __restrict__ x,        // [K]
    __nv_bfloat16* __restrict__ out,            // [N]
    float* __restrict__ ws,                     // [splits, N] fp32 partial sums (splits > 1)
    unsigned* __restrict__ counters,            // [gridDim.x] zero between launches
    int K, int N) {
    constexpr int QUADS = BN / 4;                                // column quads per CTA
    constexpr int RT = GEMV_THREADS / QUADS;                     // threads per quad (row blocks in parallel)
    constexpr int BLOCKS_PER_GROUP = ROWS_PER_GROUP / ROWS;
    static_assert(ROWS_PER_GROUP % ROWS == 0 && GEMV_THREADS % QUADS == 0, "ROWS | 16, BN | 1024");
    __shared__ float red[RT][BN + 1];                            // [row threads, columns] fp32 partials
    const int quad = threadIdx.x % QUADS, rt = threadIdx.x / QUADS;
    const int n = blockIdx.x * BN + 4 * quad;                    // this thread's columns n .. n+3
    const int split = blockIdx.y, splits = gridDim.y;
    const int blocks = (K / 8) / ROWS;                           // row blocks along K
    const int b_begin = (int)((long long)split * blocks / splits);
    const int b_end = (int)((long long)(split + 1) * blocks / splits);
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    if (n < N) {                                                 // N % 8 == 0: n < N implies n + 3 < N
        const uint4* wp = qweight + (n >> 2);
        for (int b = b_begin + rt; b < b_end; b += RT) {
            const int r0 = b * ROWS, grp = b / BLOCKS_PER_GROUP;
            uint4 wv[ROWS];                                      // [ROWS rows, 4 columns] int32, all in flight
#pragma unroll
            for (int r = 0; r < ROWS; ++r) wv[r] = ld_stream16(wp + (size_t)(r0 + r) * (N / 4));
            const unsigned zw = __ldg(qzeros + (size_t)grp * (N / 8) + (n >> 3)) >> ((n & 7) * 4);
            const uint2 sv = __ldg(reinterpret_cast<const uint2*>(scales + (size_t)grp * N + n));
            __nv_bfloat162 zb[4];
            float gacc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
            for (int c = 0; c < 4; ++c) zb[c] = u32_as_bf162(bf16x2_biased_zero((zw >> (4 * c)) & 0xfu));
#pragma unroll
            for (int r = 0; r < ROWS; ++r)
                gemv_dot_row(wv[r], __ldg(reinterpret_cast<const uint4*>(x) + r0 + r), zb, gacc);
            gemv_apply_scales(gacc, sv, acc);
        }
    }
#pragma unroll
    for (int c = 0; c < 4; ++c) red[rt][4 * quad + c] = acc[c];
    __syncthreads();
    const int col = blockIdx.x * BN + threadIdx.x;
    float sum = 0.f;
    if (threadIdx.x < BN) {
#pragma unroll 8
        for (int r = 0; r < RT; ++r) sum += red[r][threadIdx.x];  // fixed order: deterministic
    }
    gemv_splitk_store(sum, threadIdx.x < BN && col < N, col, out, ws, counters + blockIdx.x, split, splits, N);
}
// [[/snippet]]

// ---------------------------------------------------------------------------------------------------
// W4A16 tensor-core GEMM v3: w4a16_marlin's stage, copies and inner loop on a persistent, striped grid
// (as Marlin's own kernel partitions the work). v2's grid is tiles x splits CTAs: at M = 16, 64 tiles x
// 4 splits = 256 CTAs for ~400 resident slots (0.65 of a wave), and a split has to be a whole divisor.
// v3 launches exactly P = SMs x (CTAs per SM) CTAs and linearizes the work into U = tiles x groups units
// (tile-major: the groups of tile 0, then tile 1, ...); CTA c takes units [c U / P, (c+1) U / P), so every
// CTA streams the same number of groups (+-1) and the cp.async pipeline runs straight across tile
// boundaries. When a CTA leaves a tile it flushes its accumulators: directly to C if it covered the
// whole tile, else as a partial into ws [tiles][max_contrib][M][BN] at its rank among the tile's
// contributors (the CTAs c_first(T) .. c_last(T), known from the partition); the last contributor to
// arrive sums the partials in rank order (deterministic) and stores bf16.
// Requires K % 128 == 0, N % 16 == 0, 1 <= M <= 16 MT (as w4a16_marlin).
// ---------------------------------------------------------------------------------------------------
// One thread's copies of one unit (tile T, group g): offsets that do not depend on T or g worked out once.
template <int MT, int NTW>
struct MarlinStripeCopies {
    using S = MarlinStage<MT, NTW>;
    static constexpr int NW = S::NT_CTA * 64 / 256;             // W uint4 per thread: 2 NTW
    static constexpr int NA = 16 * MT * 16 / 256;                // A 16-byte chunks per thread: MT
    int a_src[NA], a_dst[NA];
    bool a_ok[NA];
    int side_kind, side_dst, side_off;                           // 0 none, 1 scales chunk, 2 zero word

    __device__ __forceinline__ MarlinStripeCopies(int M, int K) {
#pragma unroll
        for (int j = 0; j < NA; ++j) {
            const int i = threadIdx.x + 256 * j, r = i / 16, c = i % 16;
            a_ok[j] = r < M;
            a_src[j] = (a_ok[j] ? r : 0) * K + 8 * c;
            a_dst[j] = S::W_BYTES + r * 256 + ((c ^ (r & 7)) * 16);
        }
        const int t = threadIdx.x;
        side_kind = side_dst = side_off = 0;
        if (t < S::S_BYTES / 16) {
            side_kind = 1;
            side_off = 8 * t;                                    // column within the tile
            side_dst = S::W_BYTES + S::A_BYTES + 16 * t;
        } else if (t < S::S_BYTES / 16 + S::Z_BYTES / 4) {
            side_kind = 2;
            side_off = t - S::S_BYTES / 16;                      // zero word within the tile
            side_dst = S::W_BYTES + S::A_BYTES + S::S_BYTES + 4 * side_off;
        }
    }

    __device__ __forceinline__ void issue(unsigned char* st, int T, int g, int K, int N,
                                          const uint4* __restrict__ qmma, const unsigned* __restrict__ qzeros,
                                          const __nv_bfloat16* __restrict__ scales,
                                          const __nv_bfloat16* __restrict__ A) const {
        const int ntiles = N / 16, kchunks = K / 64;
        uint4* sw = reinterpret_cast<uint4*>(st) + threadIdx.x;
#pragma unroll
        for (int j = 0; j < NW; ++j) {                           // n16 tile T NT_CTA + tid / 64 + 4 j
            const int tile = T * S::NT_CTA + (int)(threadIdx.x >> 6) + 4 * j;
            const bool ok = tile < ntiles;
            cp_async16(sw + 256 * j, qmma + ((size_t)(ok ? tile : 0) * kchunks + 2 * g) * 32 + (threadIdx.x & 63),
                       ok ? 16 : 0);
        }
#pragma unroll
        for (int j = 0; j < NA; ++j) cp_async16(st + a_dst[j], A + a_src[j] + g * GROUP, a_ok[j] ? 16 : 0);
        if (side_kind == 1) {
            const int col = T * S::BN + side_off;
            cp_async16(st + side_dst, scales + (size_t)g * N + (col < N ? col : 0), col < N ? 16 : 0);
        } else if (side_kind == 2) {
            const int word = T * (S::BN / 8) + side_off;
            cp_async4(st + side_dst, qzeros + (size_t)g * (N / 8) + (word < N / 8 ? word : 0), word < N / 8 ? 4 : 0);
        }
    }
};

// The CTA whose unit range [c U / P, (c+1) U / P) holds unit u.
__device__ __forceinline__ int stripe_owner(long long u, long long U, int P) {
    return (int)(((u + 1) * P - 1) / U);
}

// [[snippet: w4a16_marlin_v3]]
template <int MT, int NTW, int STAGES>
__global__ void __launch_bounds__(256, MT <= 2 ? 3 : 2) w4a16_marlin_v3_stripe(
    const uint4* __restrict__ qmma,             // [N/16, K/64, 32] uint4
    const unsigned* __restrict__ qzeros,        // [K/128, N/8]
    const __nv_bfloat16* __restrict__ scales,   // [K/128, N]
    const __nv_bfloat16* __restrict__ A,        // [M, K]
    __nv_bfloat16* __restrict__ C,              // [M, N]
    float* __restrict__ ws,                     // [tiles, max_contrib, M, BN] fp32 partials
    unsigned* __restrict__ counters,            // [tiles] zero between launches
    int M, int K, int N, int max_contrib) {
    using S = MarlinStage<MT, NTW>;
    extern __shared__ __align__(16) unsigned char smem[];       // [STAGES][S::BYTES]
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int G = K / GROUP, tiles = (N + S::BN - 1) / S::BN, P = gridDim.x, c = blockIdx.x;
    const long long U = (long long)tiles * G;
    const long long u0 = (long long)c * U / P, u1 = (long long)(c + 1) * U / P;
    const int count = (int)(u1 - u0);
    const MarlinStripeCopies<MT, NTW> copies(M, K);
    int T_in = (int)(u0 / G), g_in = (int)(u0 % G);              // the next unit to copy (tile, group)
    auto issue = [&](int s) {                                    // that unit into slot s, then step on
        copies.issue(smem + s * S::BYTES, T_in, g_in, K, N, qmma, qzeros, scales, A);
        if (++g_in == G) { g_in = 0; ++T_in; }
    };
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < count) issue(s);
        cp_async_commit();
    }
    float acc[MT][NTW][2][4] = {};
    int T = (int)(u0 / G), grp = (int)(u0 % G);                  // the unit being computed
    int seg_begin = grp;                                         // first group of the current tile segment

    for (int i = 0; i < count; ++i) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        const int nxt = i + STAGES - 1;
        if (nxt < count) issue(nxt % STAGES);
        cp_async_commit();

        marlin_stage_mma<MT, NTW>(smem + (i % STAGES) * S::BYTES, acc);

        if (grp != G - 1 && i != count - 1) { ++grp; continue; }   // the segment of tile T goes on
        // ---- flush tile T: this CTA covered its groups [seg_begin, grp] ----
        const int colt0 = warp * NTW * 16 + 2 * t;               // lane's first column within the tile
        const int n0 = T * S::BN;
        if (seg_begin == 0 && grp == G - 1) {                    // the whole tile: no partner
            marlin_for_each_rc(acc, M, N - n0, colt0, g, [&](float v0, float v1, int row, int col) {
                *reinterpret_cast<__nv_bfloat162*>(C + (size_t)row * N + n0 + col) = __floats2bfloat162_rn(v0, v1);
            });
        } else {
            const int c_first = stripe_owner((long long)T * G, U, P);
            const int c_last = stripe_owner((long long)T * G + G - 1, U, P);
            float* part = ws + ((size_t)T * max_contrib + (c - c_first)) * M * S::BN;
            marlin_for_each_rc(acc, M, N - n0, colt0, g, [&](float v0, float v1, int row, int col) {
                *reinterpret_cast<float2*>(part + (size_t)row * S::BN + col) = make_float2(v0, v1);
            });
            if (splitk_last_arrival(counters + T, c_last - c_first + 1)) {
                const float* base = ws + (size_t)T * max_contrib * M * S::BN;
                marlin_for_each_rc(acc, M, N - n0, colt0, g, [&](float, float, int row, int col) {
                    float2 sum = make_float2(0.f, 0.f);
                    for (int r = 0; r <= c_last - c_first; ++r) {    // rank order: deterministic
                        const float2 v = __ldcg(reinterpret_cast<const float2*>(base + ((size_t)r * M + row) * S::BN + col));
                        sum.x += v.x;
                        sum.y += v.y;
                    }
                    *reinterpret_cast<__nv_bfloat162*>(C + (size_t)row * N + n0 + col) = __floats2bfloat162_rn(sum.x, sum.y);
                });
            }
        }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int j = 0; j < NTW; ++j)
#pragma unroll
                for (int h = 0; h < 2; ++h)
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc[mt][j][h][e] = 0.f;
        seg_begin = grp = 0;                                     // the next tile starts at group 0
        ++T;
    }
    cp_async_wait<0>();
}
// [[/snippet]]

// ---------------------------------------------------------------------------------------------------
// [[snippet: w4a16_gemv_v6]]
// v6: v1's threads, loads and arithmetic on a tiled copy of qweight. In GPTQ's layout a block's 32
// columns are 128 bytes of every qweight row, and rows are N * 4 bytes apart (32 KB at N = 8192): the
// block's 128 KB of weights are 1024 separate 128-byte pieces spread over the whole matrix, so HBM opens
// a DRAM page for each piece and the pieces of neighbouring blocks arrive at different times.
// pack_gemv_tiled stores each 32-column tile's rows back to back ([ceil(N/32), K/8, 32] int32; the last
// tile zero-padded), so one block streams one contiguous 128 KB range. Only the addresses change.
extern "C" __global__ void __launch_bounds__(GEMV_THREADS, 2) w4a16_gemv_v6_tiled(
    const uint4* __restrict__ qtiled,           // [ceil(N/32), K/8, 8] uint4 = [ceil(N/32), K/8, 32] int32
    const unsigned* __restrict__ qzeros,        // [K/128, N/8]
    const __nv_bfloat16* __restrict__ scales,   // [K/128, N]
    const __nv_bfloat16* __restrict__ x,        // [K]
    __nv_bfloat16* __restrict__ out,            // [N]
    int K, int N) {
    const uint4* tile = qtiled + (size_t)blockIdx.x * (K / 8) * (GEMV_COLS / 4);   // this block's [K/8, 8] uint4
    gemv_magic(tile + (threadIdx.x & 7), GEMV_COLS / 4, qzeros, scales, x, out, K, N);
}
// [[/snippet]]
