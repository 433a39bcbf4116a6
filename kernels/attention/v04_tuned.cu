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

// What masking needs to know, kept as the few ints it derives each row's limit from (attn_visible) when a tile
// needs it, instead of 2 MT limits held in registers through the whole loop.
struct Fa2Mask {
    int wrow, Sq, Sk, causal;
};

// One key tile for a warp's MT x 16 rows: S = Q K^T from the staged tiles kc, vc, masked when MASK (the tile
// crosses some row's last visible key), the online softmax, O += P V. Q comes from qr (Q_IN_REGS) or qs.
template <int D, int BC, int MT, bool Q_IN_REGS, bool MASK>
__device__ __forceinline__ void fa2_key_tile(const __nv_bfloat16* qs, const unsigned (&qr)[Q_IN_REGS ? MT : 1][Q_IN_REGS ? D / 16 : 1][4],
                                             const __nv_bfloat16* kc, const __nv_bfloat16* vc, int j0,
                                             const Fa2Mask& mk, const Fa2LaneOffsets<D>& at,
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
        const int g = threadIdx.x % 32 / 4;
#pragma unroll
        for (int i = 0; i < MT; ++i) {
            const int lim[2] = {attn_visible(mk.wrow + 16 * i + g, mk.Sq, mk.Sk, mk.causal),
                                attn_visible(mk.wrow + 16 * i + 8 + g, mk.Sq, mk.Sk, mk.causal)};
            fa2_mask(s[i], j0, lim);
        }
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
// Where one (sequence, query head) lives: its q, out and lse rows, its key/value head's k and v rows, the lengths,
// and the row strides in elements (lse rows are adjacent).
struct Fa2Head {
    const __nv_bfloat16 *q, *k, *v;
    __nv_bfloat16* out;
    float* lse;
    int Sq, Sk, q_stride, kv_stride;
};

// The forward of one block: row tile tile_m of one head.
template <int D, int BC, bool Q_IN_REGS>
__device__ __forceinline__ void attn_fwd_tuned_block(const Fa2Head& hd, int tile_m, int causal, float scale,
                                                     float scale_log2) {
    constexpr int MT = 2, BR = 4 * 16 * MT, KT = D / 16, OT = D / 8;
    extern __shared__ __align__(128) unsigned char smem[];
    __nv_bfloat16* qs = reinterpret_cast<__nv_bfloat16*>(smem);     // [BR][D]
    __nv_bfloat16* ks = qs + BR * D;                                 // [2][BC][D]
    __nv_bfloat16* vs = ks + 2 * BC * D;                             // [2][BC][D]
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int Sq = hd.Sq, Sk = hd.Sk;
    const int row0 = tile_m * BR, wrow = row0 + 16 * MT * warp;    // the warp's rows: wrow .. wrow + 16 MT - 1
    const Fa2Mask mk{wrow, Sq, Sk, causal};
    const int tiles = (attn_visible(min(row0 + BR, Sq) - 1, Sq, Sk, causal) + BC - 1) / BC;
    const int unmasked = attn_visible(row0, Sq, Sk, causal) / BC;   // tiles every row of the block sees whole

    fa2_load_tile<BR, D>(qs, hd.q, row0, Sq, hd.q_stride);          // group 0: Q and the first K, V tile
    if (tiles > 0) {
        fa2_load_tile<BC, D>(ks, hd.k, 0, Sk, hd.kv_stride);
        fa2_load_tile<BC, D>(vs, hd.v, 0, Sk, hd.kv_stride);
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
            fa2_load_tile<BC, D>(ks + (cur ^ 1) * BC * D, hd.k, (j + 1) * BC, Sk, hd.kv_stride);
            fa2_load_tile<BC, D>(vs + (cur ^ 1) * BC * D, hd.v, (j + 1) * BC, Sk, hd.kv_stride);
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
            fa2_key_tile<D, BC, MT, Q_IN_REGS, false>(qs, qr, ks + cur * BC * D, vs + cur * BC * D, j * BC, mk, at, st,
                                                     o, scale_log2);
        else
            fa2_key_tile<D, BC, MT, Q_IN_REGS, true>(qs, qr, ks + cur * BC * D, vs + cur * BC * D, j * BC, mk, at, st,
                                                    o, scale_log2);
        __syncthreads();                                             // stage cur is refilled at iteration j + 1
    }
    cp_async_wait<0>();
#pragma unroll
    for (int i = 0; i < MT; ++i) fa2_store<OT>(o[i], st[i], hd.out, hd.lse, wrow + 16 * i, Sq, scale, hd.q_stride);
}

// [B, H, S, D] tensors: block (x, h, b). Causal blocks are scheduled heaviest first (row tile gridDim.x - 1 - x).
template <int D, int BC, bool Q_IN_REGS>
__global__ void __launch_bounds__(128, 2)
attn_fwd_tuned(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
               const __nv_bfloat16* __restrict__ v, __nv_bfloat16* __restrict__ out, float* __restrict__ lse,
               int Hq, int Hkv, int Sq, int Sk, int causal, float scale, float scale_log2) {
    const int h = blockIdx.y, b = blockIdx.z, kvh = h / (Hq / Hkv);
    const size_t qh = (size_t)b * Hq + h, kvhd = (size_t)b * Hkv + kvh;
    const Fa2Head hd{q + qh * Sq * D, k + kvhd * Sk * D, v + kvhd * Sk * D, out + qh * Sq * D, lse + qh * Sq,
                     Sq, Sk, D, D};
    attn_fwd_tuned_block<D, BC, Q_IN_REGS>(hd, causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x, causal, scale,
                                           scale_log2);
}
// [[/snippet]]

// [[snippet: attn_fwd_varlen]]
// Variable-length batches (flash-attention's varlen layout): sequence b's queries are rows cu_q[b] .. cu_q[b + 1] - 1
// of q and out [Tq, Hq, D], its keys rows cu_k[b] .. of k and v [Tk, Hkv, D]; lse is [Hq, Tq]. The grid covers
// the longest sequence; a block past its own sequence's end has nothing to do.
template <int D, int BC, bool Q_IN_REGS>
__global__ void __launch_bounds__(128, 2)
attn_fwd_tuned_varlen(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
                      const __nv_bfloat16* __restrict__ v, __nv_bfloat16* __restrict__ out, float* __restrict__ lse,
                      const int* __restrict__ cu_q, const int* __restrict__ cu_k, int Hq, int Hkv, int causal,
                      float scale, float scale_log2) {
    constexpr int BR = 128;
    const int h = blockIdx.y, b = blockIdx.z, kvh = h / (Hq / Hkv);
    const int q0 = cu_q[b], Sq = cu_q[b + 1] - q0, k0 = cu_k[b], Sk = cu_k[b + 1] - k0, Tq = cu_q[gridDim.z];
    const int tiles_m = (Sq + BR - 1) / BR;
    if ((int)blockIdx.x >= tiles_m) return;                          // the whole block leaves: no barrier is skipped
    const Fa2Head hd{q + ((size_t)q0 * Hq + h) * D, k + ((size_t)k0 * Hkv + kvh) * D, v + ((size_t)k0 * Hkv + kvh) * D,
                     out + ((size_t)q0 * Hq + h) * D, lse + (size_t)h * Tq + q0, Sq, Sk, Hq * D, Hkv * D};
    attn_fwd_tuned_block<D, BC, Q_IN_REGS>(hd, causal ? tiles_m - 1 - blockIdx.x : blockIdx.x, causal, scale,
                                           scale_log2);
}
// [[/snippet]]
