// v04_tuned.cu: FlashAttention forward v4 (chapter 15): v3 with the block shape flash-attention uses on Ampere and
// Hopper for its mma.sync kernel. A block of 4 warps owns 128 query rows, two m16 tiles a warp: every K fragment
// (ldmatrix.x4) and every V fragment (ldmatrix.x4.trans) now feeds four mmas instead of two, halving the
// shared-memory reads per mma, the limit v2 and v3 ran into. The price is registers: a warp's S and O are twice
// as large, so Q's fragments are reloaded from shared memory for every key tile unless Q_IN_REGS (D = 64 only),
// and the tiles are chosen per head dimension from a sweep (BC keys a tile). Shared memory is dynamic: Q, two
// stages of K and V. Causal blocks are scheduled heaviest first: block x takes row tile gridDim.x - 1 - x, so the
// short blocks of the top rows fill the last wave. Masking as v3: only the tiles that cross a row's last key.
#include "fa2_tiles.cuh"

// [[snippet: fa2_lane_offsets]]
// Where a lane's ldmatrix rows lie in the swizzled tiles, computed once. Every row a lane addresses in the key-tile
// loop has row % 8 = lane % 8, and its 16-byte chunk index is an even constant plus one bit of the lane's own, so
// the swizzled chunk is 8 (c / 8) + ((c % 8) ^ x) for a 3-bit x of the lane: four low parts, u = c % 8 / 2. With
// them precomputed, each ldmatrix address is a lane offset plus a compile-time constant (fa2_swz inline costs
// about five integer instructions per ldmatrix, which at 80 ldmatrix a tile rivals the mma count).
template <int D>
struct Fa2LaneOffsets {
    int q[4], k[4], v[4];   // elements: + 16 i D + 64 (kk / 4) (Q), + 8 n D + 64 (kk / 4) (K), + 16 kk D + 64 (n / 8) (V)
    __device__ __forceinline__ Fa2LaneOffsets(int warp_row0, int lane) {
        const int r = lane % 8, m = lane / 8;
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            q[u] = (warp_row0 + lane % 16) * D + 8 * ((2 * u) ^ ((lane / 16) ^ r));   // A: rows +16, chunk + lane/16
            k[u] = (8 * (m / 2) + r) * D + 8 * ((2 * u) ^ ((m % 2) ^ r));            // B: rows +8 (m/2), chunk + m%2
            v[u] = (8 * (m % 2) + r) * D + 8 * ((2 * u) ^ ((m / 2) ^ r));            // B^T: rows +8 (m%2), chunk + m/2
        }
    }
};
// [[/snippet]]

// One key tile for a warp's MT x 16 rows: S = Q K^T from the staged tiles kc, vc, masked when MASK (the tile
// crosses some row's last visible key), the online softmax, O += P V. Q comes from qr (Q_IN_REGS) or qs.
template <int D, int BC, int MT, bool Q_IN_REGS, bool MASK>
__device__ __forceinline__ void fa2_key_tile(const __nv_bfloat16* qs, const unsigned (&qr)[Q_IN_REGS ? MT : 1][Q_IN_REGS ? D / 16 : 1][4],
                                             const __nv_bfloat16* kc, const __nv_bfloat16* vc, int j0,
                                             const int (&lim)[MT][2], const Fa2LaneOffsets<D>& at,
                                             SoftmaxState (&st)[MT][2], float (&o)[MT][D / 8][4], float scale_log2) {
    constexpr int KT = D / 16, NT = BC / 8, OT = D / 8;
    float s[MT][NT][4];
#pragma unroll
    for (int i = 0; i < MT; ++i) fa2_zero(s[i]);
#pragma unroll
    for (int kk = 0; kk < KT; ++kk) {
        unsigned qa[MT][4];
#pragma unroll
        for (int i = 0; i < MT; ++i) {
            if constexpr (Q_IN_REGS) {
#pragma unroll
                for (int e = 0; e < 4; ++e) qa[i][e] = qr[i][kk][e];
            } else {
                ldmatrix_x4(qa[i], qs + at.q[kk % 4] + 16 * i * D + 64 * (kk / 4));
            }
        }
#pragma unroll
        for (int n = 0; n < NT; n += 2) {                            // one K fragment pair, 2 MT mmas
            unsigned kb[4];
            ldmatrix_x4(kb, kc + at.k[kk % 4] + 8 * n * D + 64 * (kk / 4));
#pragma unroll
            for (int i = 0; i < MT; ++i) {
                mma_m16n8k16_bf16(s[i][n], qa[i], kb[0], kb[1]);
                mma_m16n8k16_bf16(s[i][n + 1], qa[i], kb[2], kb[3]);
            }
        }
    }
    if constexpr (MASK) {
#pragma unroll
        for (int i = 0; i < MT; ++i) fa2_mask(s[i], j0, lim[i]);
    }
#pragma unroll
    for (int i = 0; i < MT; ++i) fa2_softmax_tile<NT, OT>(s[i], st[i], o[i], scale_log2);
#pragma unroll
    for (int kk = 0; kk < BC / 16; ++kk) {
        unsigned pa[MT][4];
#pragma unroll
        for (int i = 0; i < MT; ++i) fa2_p_as_a<NT>(s[i], kk, pa[i]);
#pragma unroll
        for (int n = 0; n < OT; n += 2) {                            // one V fragment pair, 2 MT mmas
            unsigned vb[4];
            ldmatrix_x4_trans(vb, vc + at.v[(n / 2) % 4] + 16 * kk * D + 64 * (n / 8));
#pragma unroll
            for (int i = 0; i < MT; ++i) {
                mma_m16n8k16_bf16(o[i][n], pa[i], vb[0], vb[1]);
                mma_m16n8k16_bf16(o[i][n + 1], pa[i], vb[2], vb[3]);
            }
        }
    }
}

// [[snippet: attn_fwd_v4]]
template <int D, int BC, bool Q_IN_REGS>
__global__ void __launch_bounds__(128, 2)
attn_fwd_tuned(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
               const __nv_bfloat16* __restrict__ v, __nv_bfloat16* __restrict__ out, float* __restrict__ lse,
               int Hq, int Hkv, int Sq, int Sk, int causal, float scale, float scale_log2) {
    constexpr int MT = 2, BR = 4 * 16 * MT, KT = D / 16, OT = D / 8;
    extern __shared__ __align__(128) unsigned char smem[];
    __nv_bfloat16* qs = reinterpret_cast<__nv_bfloat16*>(smem);     // [BR][D]
    __nv_bfloat16* ks = qs + BR * D;                                 // [2][BC][D]
    __nv_bfloat16* vs = ks + 2 * BC * D;                             // [2][BC][D]
    const int h = blockIdx.y, b = blockIdx.z, kvh = h / (Hq / Hkv);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4;
    const int tile_m = causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    const int row0 = tile_m * BR, wrow = row0 + 16 * MT * warp;    // the warp's rows: wrow .. wrow + 16 MT - 1
    const __nv_bfloat16* q_head = q + ((size_t)b * Hq + h) * Sq * D;
    const __nv_bfloat16* k_head = k + ((size_t)b * Hkv + kvh) * Sk * D;
    const __nv_bfloat16* v_head = v + ((size_t)b * Hkv + kvh) * Sk * D;
    int lim[MT][2];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int e = 0; e < 2; ++e) lim[i][e] = attn_visible(wrow + 16 * i + 8 * e + g, Sq, Sk, causal);
    const int tiles = (attn_visible(min(row0 + BR, Sq) - 1, Sq, Sk, causal) + BC - 1) / BC;
    const int unmasked = attn_visible(row0, Sq, Sk, causal) / BC;   // tiles every row of the block sees whole

    fa2_load_tile<BR, D>(qs, q_head, row0, Sq);                      // group 0: Q and the first K, V tile
    if (tiles > 0) {
        fa2_load_tile<BC, D>(ks, k_head, 0, Sk);
        fa2_load_tile<BC, D>(vs, v_head, 0, Sk);
    }
    cp_async_commit();
    SoftmaxState st[MT][2];
    float o[MT][OT][4];
#pragma unroll
    for (int i = 0; i < MT; ++i) {
        st[i][0] = st[i][1] = softmax_state_empty();
        fa2_zero(o[i]);
    }
    const Fa2LaneOffsets<D> at(16 * MT * warp, lane);
    unsigned qr[Q_IN_REGS ? MT : 1][Q_IN_REGS ? KT : 1][4];         // Q's A fragments, when they stay loaded
    for (int j = 0; j < tiles; ++j) {
        const int cur = j & 1;
        if (j + 1 < tiles) {                                         // the next tile's copies run during this one
            fa2_load_tile<BC, D>(ks + (cur ^ 1) * BC * D, k_head, (j + 1) * BC, Sk);
            fa2_load_tile<BC, D>(vs + (cur ^ 1) * BC * D, v_head, (j + 1) * BC, Sk);
        }
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        if constexpr (Q_IN_REGS) {
            if (j == 0)
#pragma unroll
                for (int i = 0; i < MT; ++i)
#pragma unroll
                    for (int kk = 0; kk < KT; ++kk)
                        ldmatrix_x4(qr[i][kk], qs + at.q[kk % 4] + 16 * i * D + 64 * (kk / 4));
        }
        if (j < unmasked)
            fa2_key_tile<D, BC, MT, Q_IN_REGS, false>(qs, qr, ks + cur * BC * D, vs + cur * BC * D, j * BC, lim, at, st,
                                                     o, scale_log2);
        else
            fa2_key_tile<D, BC, MT, Q_IN_REGS, true>(qs, qr, ks + cur * BC * D, vs + cur * BC * D, j * BC, lim, at, st,
                                                    o, scale_log2);
        __syncthreads();                                             // stage cur is refilled at iteration j + 1
    }
    cp_async_wait<0>();
#pragma unroll
    for (int i = 0; i < MT; ++i)
        fa2_store<OT>(o[i], st[i], out + ((size_t)b * Hq + h) * Sq * D, lse + ((size_t)b * Hq + h) * Sq,
                      wrow + 16 * i, Sq, scale);
}
// [[/snippet]]
