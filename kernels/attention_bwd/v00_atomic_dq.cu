// v00_atomic_dq.cu: FlashAttention-2 backward, key-tile kernel (chapter 16; Dao 2023, Algorithm 2).
//   v0 attn_bwd_v0_atomic_dq: ATOMIC_DQ = true. A block owns BN keys of one (batch, kv head) and walks every query
//      tile that sees them, for every query head of its GQA group; dK and dV stay in registers for the whole walk
//      (no atomics: no other block touches these keys), dQ's share of each step is added to an fp32 accumulator
//      in global memory with atomics.
//   v1 attn_bwd_v1_deterministic launches the same kernel with ATOMIC_DQ = false (dK and dV only) and computes dQ
//      in a kernel of its own (v01_deterministic.cu).
//
// Layout. Each of the BN / 16 warps owns 16 keys, as the rows of S^T = K Q^T (keys x queries). The transposed
// product puts P^T and dS^T in the accumulator layout, which is the A-operand layout of dV += P^T dO and
// dK += dS^T Q (fa2_p_as_a, as the forward's P V): no shuffle, no shared memory, and each warp's dK, dV rows are
// its own. Q and dO enter S^T and dP^T = V dO^T as B operands read plainly from their [query][d] tiles, and dV,
// dK as B operands read transposed. dQ = dS K needs queries as rows, across all warps' keys: each warp stores its
// dS^T rows to shared memory as bf16 (4-byte stores, conflict-free with the swizzle), and after a barrier the
// warps read dS back through ldmatrix.trans, which transposes 8 x 8 blocks on the way: that is the A fragment of
// dS with no extra pass. The dQ product is split 2-D over the warps (32 query rows by D / (WARPS BM / 32)
// columns each) so that every fragment feeds several mmas.
//
// Pipeline: K and V are loaded once; Q, dO and the rows' lse and delta are double-buffered by cp.async, the next
// step's copies running under the current step's five products.
#include "fa2_bwd_common.cuh"

// Where a warp's dQ tile reads, fixed for the whole kernel: its 32 query rows of dS^T ([BN][BM], two m16 tiles) and
// its NQ n8 columns of K ([BN][D], NQ / 2 tile pairs). The warp's position is known only at run time, so these are
// computed once here rather than indexed out of BwdLaneOffsets (a run-time index would put that array in local
// memory).
template <int D, int BN, int BM>
struct DqWarpTile {
    static constexpr int WARPS = BN / 16, WR = BM / 32, WC = WARPS / WR, NQ = D / WC / 8;
    static_assert(WR * WC == WARPS && NQ % 2 == 0, "dQ: 32-row by 16k-column warp tiles");
    int mq0, nq0;              // first query row, first n8 column tile
    int ds[2], kb[NQ / 2];     // element offsets in dS^T (per m16 tile) and in K (per pair of n8 tiles)
    __device__ __forceinline__ DqWarpTile(int warp, int lane) : mq0(32 * (warp / WC)), nq0(NQ * (warp % WC)) {
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
            const int m0 = mq0 + 16 * mt;
            ds[mt] = BwdLaneOffsets<BM>::plain_b((m0 / 16) % 4, lane) + 64 * (m0 / 64);
        }
#pragma unroll
        for (int n = 0; n < NQ; n += 2) {
            const int nn = nq0 + n;
            kb[n / 2] = BwdLaneOffsets<D>::trans_b((nn / 2) % 4, lane) + 64 * (nn / 8);
        }
    }
};

// [[snippet: attn_bwd_dkdv_step]]
// One (query head, query tile) step for a warp's 16 keys: S^T and dP^T, P^T and dS^T, dV and dK, and with
// ATOMIC_DQ dQ's contribution. kmin[e]: the first query row that sees key row g + 8 e of the warp (int max for
// keys past Sk); MASK: some (key, query) pair of the tile is not visible.
template <int D, int BN, int BM, bool MASK, bool ATOMIC_DQ>
__device__ __forceinline__ void dkdv_step(const __nv_bfloat16* ks, const __nv_bfloat16* vs, const __nv_bfloat16* qs,
                                          const __nv_bfloat16* dos, const float* lse_s, const float* delta_s,
                                          __nv_bfloat16* dss, float* dq_rows, int dq_stride, int i0, int Sq,
                                          const int (&kmin)[2],
                                          const BwdLaneOffsets<D>& at, const DqWarpTile<D, BN, BM>& wt,
                                          float (&dk)[D / 8][4], float (&dv)[D / 8][4], float scale_log2) {
    constexpr int WARPS = BN / 16, NT = BM / 8, OT = D / 8, KT = D / 16;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    float s[NT][4], dp[NT][4];                   // S^T, dP^T: [16 keys, BM queries] of the warp
    fa2_zero(s);
    fa2_zero(dp);
#pragma unroll
    for (int kk = 0; kk < KT; ++kk) {
        unsigned ka[4], va[4];
        ldmatrix_x4(ka, ks + at.a[kk % 4] + 64 * (kk / 4) + 16 * warp * D);
        ldmatrix_x4(va, vs + at.a[kk % 4] + 64 * (kk / 4) + 16 * warp * D);
#pragma unroll
        for (int n = 0; n < NT; n += 2) {
            unsigned qb[4], ob[4];
            ldmatrix_x4(qb, qs + at.b[kk % 4] + 8 * n * D + 64 * (kk / 4));
            mma_m16n8k16_bf16(s[n], ka, qb[0], qb[1]);
            mma_m16n8k16_bf16(s[n + 1], ka, qb[2], qb[3]);
            ldmatrix_x4(ob, dos + at.b[kk % 4] + 8 * n * D + 64 * (kk / 4));
            mma_m16n8k16_bf16(dp[n], va, ob[0], ob[1]);
            mma_m16n8k16_bf16(dp[n + 1], va, ob[2], ob[3]);
        }
    }
    // P^T = exp2(s scale_log2 - lse_log2) (0 for padded rows and rows that see no key: lse_log2 = +inf there), and
    // dS^T = P^T o (dP^T - delta), rounded to bf16 as soon as each 16-query slice is done: packed, they are the A
    // fragments of dV and dK (fa2_p_as_a) at half the registers of the fp32 tiles. Query column c = 8 n + 2 t (+ 1).
    unsigned pa[BM / 16][4], da[BM / 16][4];
#pragma unroll
    for (int n = 0; n < NT; ++n) {
        const float2 l2 = *reinterpret_cast<const float2*>(lse_s + 8 * n + 2 * t);
        const float2 dl = *reinterpret_cast<const float2*>(delta_s + 8 * n + 2 * t);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            float p = exp2f(fmaf(s[n][e], scale_log2, -((e & 1) ? l2.y : l2.x)));
            if constexpr (MASK) {
                if (i0 + 8 * n + 2 * t + (e & 1) < kmin[e >> 1]) p = 0.f;
            }
            s[n][e] = p;
            dp[n][e] = p * (dp[n][e] - ((e & 1) ? dl.y : dl.x));
        }
        if (n % 2 == 1) {
            fa2_p_as_a<NT>(s, n / 2, pa[n / 2]);
            fa2_p_as_a<NT>(dp, n / 2, da[n / 2]);
        }
    }
    // dV += P^T dO, dK += dS^T Q: k runs over the tile's queries.
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk) {
#pragma unroll
        for (int n = 0; n < OT; n += 2) {
            unsigned ob[4], qb[4];
            ldmatrix_x4_trans(ob, dos + at.bt[(n / 2) % 4] + 16 * kk * D + 64 * (n / 8));
            mma_m16n8k16_bf16(dv[n], pa[kk], ob[0], ob[1]);
            mma_m16n8k16_bf16(dv[n + 1], pa[kk], ob[2], ob[3]);
            ldmatrix_x4_trans(qb, qs + at.bt[(n / 2) % 4] + 16 * kk * D + 64 * (n / 8));
            mma_m16n8k16_bf16(dk[n], da[kk], qb[0], qb[1]);
            mma_m16n8k16_bf16(dk[n + 1], da[kk], qb[2], qb[3]);
        }
    }
    if constexpr (ATOMIC_DQ) {
        // dS^T -> shared memory, [BN keys][BM queries] bf16, swizzled.
#pragma unroll
        for (int n = 0; n < NT; ++n)                                 // da[n / 2][2 (n % 2) + h]: row g + 8 h
#pragma unroll
            for (int h = 0; h < 2; ++h)
                *reinterpret_cast<unsigned*>(dss + fa2_swz<BM>(16 * warp + g + 8 * h, 8 * n + 2 * t)) =
                    da[n / 2][2 * (n % 2) + h];
        __syncthreads();
        // dQ[BM][D] += dS K over the tile's BN keys: warp (wr, wc) takes query rows 32 wr .. + 31 and head
        // columns CQ wc .. + CQ - 1. dS's A fragments come from dS^T by ldmatrix.trans, K's B fragments by
        // ldmatrix.trans of the [key][d] tile.
        constexpr int NQ = DqWarpTile<D, BN, BM>::NQ;
        float acc[2][NQ][4];
        fa2_zero(acc[0]);
        fa2_zero(acc[1]);
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
            unsigned a[2][4];
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) ldmatrix_x4_trans(a[mt], dss + wt.ds[mt] + 16 * kk * BM);
#pragma unroll
            for (int n = 0; n < NQ; n += 2) {
                unsigned kb[4];
                ldmatrix_x4_trans(kb, ks + wt.kb[n / 2] + 16 * kk * D);
#pragma unroll
                for (int mt = 0; mt < 2; ++mt) {
                    mma_m16n8k16_bf16(acc[mt][n], a[mt], kb[0], kb[1]);
                    mma_m16n8k16_bf16(acc[mt][n + 1], a[mt], kb[2], kb[3]);
                }
            }
        }
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int i = i0 + wt.mq0 + 16 * mt + g + 8 * h;
                if (i >= Sq) continue;
#pragma unroll
                for (int n = 0; n < NQ; ++n)
                    bwd_atomic_add2(dq_rows + (size_t)i * dq_stride + 8 * (wt.nq0 + n) + 2 * t, acc[mt][n][2 * h],
                                    acc[mt][n][2 * h + 1]);
            }
    }
}
// [[/snippet]]

// [[snippet: attn_bwd_v0]]
template <int D, int BN, int BM, bool ATOMIC_DQ>
__global__ void __launch_bounds__(2 * BN, 1)
attn_bwd_dkdv(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
              const __nv_bfloat16* __restrict__ v, const __nv_bfloat16* __restrict__ dout,
              const float* __restrict__ lse_log2, const float* __restrict__ delta, float* __restrict__ dq_accum,
              __nv_bfloat16* __restrict__ dk, __nv_bfloat16* __restrict__ dv, int Hq, int Hkv, int Sq, int Sk,
              int causal, float scale, float scale_log2, int Sq_pad, const int* __restrict__ cu_q,
              const int* __restrict__ cu_k, int Tq, int Tk) {
    constexpr int THREADS = 2 * BN, OT = D / 8;
    extern __shared__ __align__(128) unsigned char smem[];
    __nv_bfloat16* ks = reinterpret_cast<__nv_bfloat16*>(smem);     // [BN][D]
    __nv_bfloat16* vs = ks + BN * D;                                 // [BN][D]
    __nv_bfloat16* qs = vs + BN * D;                                 // [2][BM][D]
    __nv_bfloat16* dos = qs + 2 * BM * D;                            // [2][BM][D]
    float* lse_s = reinterpret_cast<float*>(dos + 2 * BM * D);       // [2][BM]
    float* delta_s = lse_s + 2 * BM;                                 // [2][BM]
    __nv_bfloat16* dss = reinterpret_cast<__nv_bfloat16*>(delta_s + 2 * BM);   // [BN][BM], ATOMIC_DQ only
    const int kvh = blockIdx.y, b = blockIdx.z, group = Hq / Hkv;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4;
    const int j0 = blockIdx.x * BN;                                  // causal: block 0 has the most queries
    if (cu_q != nullptr) {                                           // varlen: sequence b's lengths; the grid
        Sq = cu_q[b + 1] - cu_q[b];                                  // covers the longest, so a block past its
        Sk = cu_k[b + 1] - cu_k[b];                                  // own keys leaves whole (no barrier skipped)
        if (j0 >= Sk) return;
    }
    const BwdSeq kv = bwd_seq<D>(cu_k, b, kvh, Hkv, Sk, Tk);
    // The query tiles that see some key of this block: with bottom-right causal masking, query i sees key j when
    // i >= j - (Sk - Sq), so the walk starts at the tile holding row j0 - (Sk - Sq).
    const int first = causal ? max(0, j0 - (Sk - Sq)) / BM : 0;
    const int tiles = (Sq + BM - 1) / BM - first, steps = group * tiles;
    int kmin[2];                                                     // first query row seeing key row g (+ 8)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
        const int j = j0 + 16 * warp + g + 8 * e;
        kmin[e] = j >= Sk ? 0x7fffffff : causal ? j - (Sk - Sq) : -0x7fffffff;
    }
    const __nv_bfloat16* k_head = k + kv.row0;
    const __nv_bfloat16* v_head = v + kv.row0;
    // Step s: query head kvh * group + s / tiles, query tile first + s % tiles.
    auto load_step = [&](int s, int stage) {
        const int h = kvh * group + s / tiles, i0 = (first + s % tiles) * BM;
        const size_t bh = (size_t)b * Hq + h;
        const BwdSeq qr = bwd_seq<D>(cu_q, b, h, Hq, Sq, Tq);
        fa2_load_tile<BM, D, THREADS>(qs + stage * BM * D, q + qr.row0, i0, Sq, qr.stride);
        fa2_load_tile<BM, D, THREADS>(dos + stage * BM * D, dout + qr.row0, i0, Sq, qr.stride);
        bwd_load_floats<BM>(lse_s + stage * BM, lse_log2 + bh * Sq_pad + i0, 0);
        bwd_load_floats<BM>(delta_s + stage * BM, delta + bh * Sq_pad + i0, BM / 4);
    };
    fa2_load_tile<BN, D, THREADS>(ks, k_head, j0, Sk, kv.stride);    // group 0: K, V and the first step
    fa2_load_tile<BN, D, THREADS>(vs, v_head, j0, Sk, kv.stride);
    if (steps > 0) load_step(0, 0);                                  // varlen: a sequence may have no queries
    cp_async_commit();
    float dk_acc[OT][4], dv_acc[OT][4];
    fa2_zero(dk_acc);
    fa2_zero(dv_acc);
    const BwdLaneOffsets<D> at(0, lane);             // the warp's key rows are added where used
    const DqWarpTile<D, BN, BM> wt(warp, lane);
    for (int s = 0; s < steps; ++s) {
        const int cur = s & 1;
        if (s + 1 < steps) load_step(s + 1, cur ^ 1);                // runs during this step's products
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        const int h = kvh * group + s / tiles, i0 = (first + s % tiles) * BM;
        const BwdSeq qr = bwd_seq<D>(cu_q, b, h, Hq, Sq, Tq);       // dQ accumulator: dq's layout, fp32
        float* dq_rows = dq_accum + qr.row0;
        // Masking is needed where the tile's first query misses the block's last key, or keys run past Sk.
        const bool mask = j0 + BN > Sk || (causal && i0 < j0 + BN - 1 - (Sk - Sq));
        const __nv_bfloat16 *qc = qs + cur * BM * D, *dc = dos + cur * BM * D;
        if (mask)
            dkdv_step<D, BN, BM, true, ATOMIC_DQ>(ks, vs, qc, dc, lse_s + cur * BM, delta_s + cur * BM, dss, dq_rows,
                                                  qr.stride, i0, Sq, kmin, at, wt, dk_acc, dv_acc, scale_log2);
        else
            dkdv_step<D, BN, BM, false, ATOMIC_DQ>(ks, vs, qc, dc, lse_s + cur * BM, delta_s + cur * BM, dss, dq_rows,
                                                   qr.stride, i0, Sq, kmin, at, wt, dk_acc, dv_acc, scale_log2);
        __syncthreads();                                             // stage cur (and dS^T) are refilled next
    }
    cp_async_wait<0>();
    // dK = scale dS^T Q (the softmax scale enters S linearly), dV = P^T dO; keys past Sk are not stored.
    const int t = lane % 4;
    __nv_bfloat16* dk_head = dk + kv.row0;
    __nv_bfloat16* dv_head = dv + kv.row0;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int j = j0 + 16 * warp + g + 8 * h;
        if (j >= Sk) continue;
#pragma unroll
        for (int n = 0; n < OT; ++n) {
            *reinterpret_cast<unsigned*>(dk_head + (size_t)j * kv.stride + 8 * n + 2 * t) =
                pack_bf16x2(dk_acc[n][2 * h] * scale, dk_acc[n][2 * h + 1] * scale);
            *reinterpret_cast<unsigned*>(dv_head + (size_t)j * kv.stride + 8 * n + 2 * t) =
                pack_bf16x2(dv_acc[n][2 * h], dv_acc[n][2 * h + 1]);
        }
    }
}
// [[/snippet]]
