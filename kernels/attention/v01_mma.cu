// v01_mma.cu: FlashAttention forward v1 (chapter 15): both products on tensor cores with mma.sync.m16n8k16, S and
// P never leaving registers. A block of 4 warps owns 64 query rows (16 a warp) of one (batch, query head); Q's
// fragments are loaded once; per key tile of BC rows the block stages K and V in shared memory, each warp computes
// its 16 x BC tile of S = Q K^T, runs the online softmax on it in registers (fa2_common.cuh), turns the
// accumulators of P into A fragments as they lie and adds P V into its 16 x D output. Dao 2023's FlashAttention-2
// forward (Algorithm 1) with the work split over warps by query rows ("split-Q"), as flash-attention 0251105's
// csrc/flash_attn/src/flash_fwd_kernel.h does; its loads here are plain 32-bit shared-memory reads (v2 brings
// ldmatrix, swizzle and cp.async). Layouts and masking as v00_scalar.cu.
#include "fa2_common.cuh"

// [[snippet: attn_fwd_v1]]
template <int D, int BC>
__global__ void __launch_bounds__(128)
attn_fwd_mma(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
             const __nv_bfloat16* __restrict__ v, __nv_bfloat16* __restrict__ out, float* __restrict__ lse,
             int Hq, int Hkv, int Sq, int Sk, int causal, float scale, float scale_log2) {
    constexpr int BR = 64, KT = D / 16, NT = BC / 8, OT = D / 8;
    __shared__ __align__(16) __nv_bfloat16 qs[BR][D];
    __shared__ __align__(16) __nv_bfloat16 ks[BC][D];
    __shared__ __align__(16) __nv_bfloat16 vs[BC][D];
    const int h = blockIdx.y, b = blockIdx.z, kvh = h / (Hq / Hkv);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int row0 = blockIdx.x * BR, wrow = row0 + 16 * warp;    // this warp's first query row
    const size_t q_head = ((size_t)b * Hq + h) * Sq, kv_head = ((size_t)b * Hkv + kvh) * Sk;
    const int lim[2] = {attn_visible(wrow + g, Sq, Sk, causal), attn_visible(wrow + g + 8, Sq, Sk, causal)};
    const int block_limit = attn_visible(min(row0 + BR, Sq) - 1, Sq, Sk, causal);   // the block's last row sees most

    for (int e = threadIdx.x; e < BR * D / 2; e += 128) {        // Q: 32-bit words, zeros past Sq
        const int r = e / (D / 2), c = 2 * (e % (D / 2));
        *reinterpret_cast<unsigned*>(&qs[r][c]) =
            row0 + r < Sq ? *reinterpret_cast<const unsigned*>(q + (q_head + row0 + r) * D + c) : 0u;
    }
    __syncthreads();
    unsigned qa[KT][4];                                          // this warp's Q as A fragments, k16 by k16
#pragma unroll
    for (int kk = 0; kk < KT; ++kk) {
        const int c = 16 * kk + 2 * t, r = 16 * warp + g;
        qa[kk][0] = *reinterpret_cast<const unsigned*>(&qs[r][c]);
        qa[kk][1] = *reinterpret_cast<const unsigned*>(&qs[r + 8][c]);
        qa[kk][2] = *reinterpret_cast<const unsigned*>(&qs[r][c + 8]);
        qa[kk][3] = *reinterpret_cast<const unsigned*>(&qs[r + 8][c + 8]);
    }

    SoftmaxState st[2] = {softmax_state_empty(), softmax_state_empty()};
    float o[OT][4];
    fa2_zero(o);
    for (int j0 = 0; j0 < block_limit; j0 += BC) {
        __syncthreads();                                         // every warp is done with the previous tile
        for (int e = threadIdx.x; e < BC * D / 2; e += 128) {    // K and V rows j0 .. j0 + BC - 1, zeros past Sk
            const int r = e / (D / 2), c = 2 * (e % (D / 2));
            const bool in = j0 + r < Sk;
            const size_t at = (kv_head + j0 + r) * D + c;
            *reinterpret_cast<unsigned*>(&ks[r][c]) = in ? *reinterpret_cast<const unsigned*>(k + at) : 0u;
            *reinterpret_cast<unsigned*>(&vs[r][c]) = in ? *reinterpret_cast<const unsigned*>(v + at) : 0u;
        }
        __syncthreads();
        float s[NT][4];                                          // S = Q K^T: B[k][n] = K[n][k], a row of K
        fa2_zero(s);
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int kk = 0; kk < KT; ++kk)
                mma_m16n8k16_bf16(s[n], qa[kk], *reinterpret_cast<const unsigned*>(&ks[8 * n + g][16 * kk + 2 * t]),
                                  *reinterpret_cast<const unsigned*>(&ks[8 * n + g][16 * kk + 2 * t + 8]));
        fa2_mask(s, j0, lim);                                    // masked keys (and keys past Sk) score -inf
        fa2_softmax_tile<NT, OT>(s, st, o, scale_log2);
#pragma unroll
        for (int kk = 0; kk < BC / 16; ++kk) {                   // O += P V, 16 keys at a time
            unsigned pa[4];
            fa2_p_as_a<NT>(s, kk, pa);
            const int r = 16 * kk + 2 * t;
#pragma unroll
            for (int n = 0; n < OT; ++n) {                       // B[k][n] = V[k][n]: two rows of V per register
                const int c = 8 * n + g;
                const unsigned b0 = pack_bf16x2(__bfloat162float(vs[r][c]), __bfloat162float(vs[r + 1][c]));
                const unsigned b1 = pack_bf16x2(__bfloat162float(vs[r + 8][c]), __bfloat162float(vs[r + 9][c]));
                mma_m16n8k16_bf16(o[n], pa, b0, b1);
            }
        }
    }
    fa2_store<OT>(o, st, out + q_head * D, lse + q_head, wrow, Sq, scale);
}
// [[/snippet]]
