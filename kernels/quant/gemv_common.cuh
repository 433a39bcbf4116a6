// gemv_common.cuh: the W4A16 GEMV's layout constants and the helpers several GEMV versions share
// (block reduction, scales, v1's row dot product).
#pragma once
#include "quant_common.cuh"

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
