// v01_deterministic.cu: FlashAttention-2 backward v1 (chapter 16): dQ without atomics.
//   v1 attn_bwd_v1_deterministic: v0's key-tile kernel with ATOMIC_DQ = false (dK, dV), then this query-tile kernel:
//      a block owns 64 MT query rows of one (batch, query head), walks the key tiles those rows see, recomputes P
//      and dS and accumulates dQ = dS K in registers. Every dQ element is then summed by one thread in one fixed
//      order, so two runs give the same bits (atomics add in whatever order the blocks arrive). The price is two
//      more products per (query, key) pair: S and dP are computed twice, 7 units of work instead of 5.
//
// The structure is the forward's (v04_tuned.cu) with dO, V in place of a second Q, K: S = Q K^T and dP = dO V^T have
// queries as rows, so P and dS land in the A-operand layout of dQ += dS K (fa2_p_as_a), with K read transposed as
// the forward reads V. lse and delta are per row, held in registers.
#include "fa2_bwd_common.cuh"

// [[snippet: attn_bwd_dq_key_tile]]
// One key tile for a warp's MT x 16 query rows: S and dP from the staged tiles kc, vc, P and dS, dQ += dS K.
template <int D, int BC, int MT, bool MASK>
__device__ __forceinline__ void dq_key_tile(const __nv_bfloat16* qs, const __nv_bfloat16* dos, const __nv_bfloat16* kc,
                                            const __nv_bfloat16* vc, int j0, const int (&lim)[MT][2],
                                            const float (&lse_l2)[MT][2], const float (&dl)[MT][2],
                                            const BwdLaneOffsets<D>& at, float (&dq)[MT][D / 8][4], float scale_log2) {
    constexpr int KT = D / 16, NT = BC / 8, OT = D / 8;
    float s[MT][NT][4], dp[MT][NT][4];
#pragma unroll
    for (int i = 0; i < MT; ++i) {
        fa2_zero(s[i]);
        fa2_zero(dp[i]);
    }
#pragma unroll
    for (int kk = 0; kk < KT; ++kk) {
        unsigned qa[MT][4], oa[MT][4];
#pragma unroll
        for (int i = 0; i < MT; ++i) {
            ldmatrix_x4(qa[i], qs + at.a[kk % 4] + 16 * i * D + 64 * (kk / 4));
            ldmatrix_x4(oa[i], dos + at.a[kk % 4] + 16 * i * D + 64 * (kk / 4));
        }
#pragma unroll
        for (int n = 0; n < NT; n += 2) {
            unsigned kb[4], vb[4];
            ldmatrix_x4(kb, kc + at.b[kk % 4] + 8 * n * D + 64 * (kk / 4));
            ldmatrix_x4(vb, vc + at.b[kk % 4] + 8 * n * D + 64 * (kk / 4));
#pragma unroll
            for (int i = 0; i < MT; ++i) {
                mma_m16n8k16_bf16(s[i][n], qa[i], kb[0], kb[1]);
                mma_m16n8k16_bf16(s[i][n + 1], qa[i], kb[2], kb[3]);
                mma_m16n8k16_bf16(dp[i][n], oa[i], vb[0], vb[1]);
                mma_m16n8k16_bf16(dp[i][n + 1], oa[i], vb[2], vb[3]);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < MT; ++i) {
        if constexpr (MASK) fa2_mask(s[i], j0, lim[i]);              // -inf: exp2 gives 0 even when lse_log2 = +inf
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const float p = exp2f(fmaf(s[i][n][e], scale_log2, -lse_l2[i][e >> 1]));
                dp[i][n][e] = p * (dp[i][n][e] - dl[i][e >> 1]);      // dS
            }
    }
#pragma unroll
    for (int kk = 0; kk < BC / 16; ++kk) {
        unsigned da[MT][4];
#pragma unroll
        for (int i = 0; i < MT; ++i) fa2_p_as_a<NT>(dp[i], kk, da[i]);
#pragma unroll
        for (int n = 0; n < OT; n += 2) {
            unsigned kb[4];
            ldmatrix_x4_trans(kb, kc + at.bt[(n / 2) % 4] + 16 * kk * D + 64 * (n / 8));
#pragma unroll
            for (int i = 0; i < MT; ++i) {
                mma_m16n8k16_bf16(dq[i][n], da[i], kb[0], kb[1]);
                mma_m16n8k16_bf16(dq[i][n + 1], da[i], kb[2], kb[3]);
            }
        }
    }
}
// [[/snippet]]

// [[snippet: attn_bwd_v1]]
template <int D, int MT, int BC>
__global__ void __launch_bounds__(128, 1)
attn_bwd_dq(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
            const __nv_bfloat16* __restrict__ v, const __nv_bfloat16* __restrict__ dout,
            const float* __restrict__ lse_log2, const float* __restrict__ delta, __nv_bfloat16* __restrict__ dq,
            int Hq, int Hkv, int Sq, int Sk, int causal, float scale, float scale_log2, int Sq_pad,
            const int* __restrict__ cu_q, const int* __restrict__ cu_k, int Tq, int Tk) {
    constexpr int BR = 64 * MT, OT = D / 8;
    extern __shared__ __align__(128) unsigned char smem[];
    __nv_bfloat16* qs = reinterpret_cast<__nv_bfloat16*>(smem);     // [BR][D]
    __nv_bfloat16* dos = qs + BR * D;                                // [BR][D]
    __nv_bfloat16* ks = dos + BR * D;                                // [2][BC][D]
    __nv_bfloat16* vs = ks + 2 * BC * D;                             // [2][BC][D]
    const int h = blockIdx.y, b = blockIdx.z, kvh = h / (Hq / Hkv);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4;
    const int tile_m = causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;   // causal: heaviest blocks first
    const int row0 = tile_m * BR, wrow = row0 + 16 * MT * warp;
    if (cu_q != nullptr) {                                           // varlen: sequence b's lengths; a block
        Sq = cu_q[b + 1] - cu_q[b];                                  // past its own rows leaves whole
        Sk = cu_k[b + 1] - cu_k[b];
        if (row0 >= Sq) return;
    }
    const size_t bh = (size_t)b * Hq + h;                            // the row workspaces are [B, Hq, Sq_pad]
    const BwdSeq qr = bwd_seq<D>(cu_q, b, h, Hq, Sq, Tq), kv = bwd_seq<D>(cu_k, b, kvh, Hkv, Sk, Tk);
    const __nv_bfloat16* k_head = k + kv.row0;
    const __nv_bfloat16* v_head = v + kv.row0;
    int lim[MT][2];
    float lse_l2[MT][2], dl[MT][2];                                  // padded rows: +inf and 0 (preprocess)
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int r = wrow + 16 * i + 8 * e + g;
            lim[i][e] = attn_visible(r, Sq, Sk, causal);
            lse_l2[i][e] = lse_log2[bh * Sq_pad + r];
            dl[i][e] = delta[bh * Sq_pad + r];
        }
    const int tiles = (attn_visible(min(row0 + BR, Sq) - 1, Sq, Sk, causal) + BC - 1) / BC;
    const int unmasked = attn_visible(row0, Sq, Sk, causal) / BC;   // tiles every row of the block sees whole

    fa2_load_tile<BR, D>(qs, q + qr.row0, row0, Sq, qr.stride);      // group 0: Q, dO and the first K, V tile
    fa2_load_tile<BR, D>(dos, dout + qr.row0, row0, Sq, qr.stride);
    if (tiles > 0) {
        fa2_load_tile<BC, D>(ks, k_head, 0, Sk, kv.stride);
        fa2_load_tile<BC, D>(vs, v_head, 0, Sk, kv.stride);
    }
    cp_async_commit();
    float acc[MT][OT][4];
#pragma unroll
    for (int i = 0; i < MT; ++i) fa2_zero(acc[i]);
    const BwdLaneOffsets<D> at(16 * MT * warp, lane);
    for (int j = 0; j < tiles; ++j) {
        const int cur = j & 1;
        if (j + 1 < tiles) {
            fa2_load_tile<BC, D>(ks + (cur ^ 1) * BC * D, k_head, (j + 1) * BC, Sk, kv.stride);
            fa2_load_tile<BC, D>(vs + (cur ^ 1) * BC * D, v_head, (j + 1) * BC, Sk, kv.stride);
        }
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        if (j < unmasked)
            dq_key_tile<D, BC, MT, false>(qs, dos, ks + cur * BC * D, vs + cur * BC * D, j * BC, lim, lse_l2, dl, at,
                                          acc, scale_log2);
        else
            dq_key_tile<D, BC, MT, true>(qs, dos, ks + cur * BC * D, vs + cur * BC * D, j * BC, lim, lse_l2, dl, at,
                                         acc, scale_log2);
        __syncthreads();
    }
    cp_async_wait<0>();
    const int t = lane % 4;
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int r = wrow + 16 * i + 8 * e + g;
            if (r >= Sq) continue;
#pragma unroll
            for (int n = 0; n < OT; ++n)
                *reinterpret_cast<unsigned*>(dq + qr.row0 + (size_t)r * qr.stride + 8 * n + 2 * t) =
                    pack_bf16x2(acc[i][n][2 * e] * scale, acc[i][n][2 * e + 1] * scale);
        }
}
// [[/snippet]]
