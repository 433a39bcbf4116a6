// v02_pipeline.cu: FlashAttention forward v2 (chapter 15): v1's registers-only softmax, with the operands moved
// the way chapter 12's GEMM moves them. Q, K and V tiles land in shared memory by cp.async in 16-byte chunks,
// XOR-swizzled (chunk c of row r at chunk c ^ (r % 8)) so that the eight rows an ldmatrix reads fall in eight
// different bank groups; ldmatrix.x4 reads Q's A fragments and K's B fragments, ldmatrix.x4.trans reads V's
// (V is [keys][d], P V needs it k-major: the transposing load delivers B[k][n] = V[k][n] as the mma wants it). K
// and V are double-buffered: the copies of tile j + 1 run while the warps compute tile j. Static shared memory
// (48 KB at most): Q and two stages of K and V, BC = 64 keys a tile at D = 64 and 32 at D = 128.
// EDGE_MASK_ONLY (v3): only the tiles that cross some row's last visible key are masked: the diagonal tiles of a
// causal block and the tile that holds Sk. The tiles above the diagonal are never loaded, by every version.
#include "fa2_tiles.cuh"

// [[snippet: attn_fwd_v2]]
template <int D, int BC, bool EDGE_MASK_ONLY>
__global__ void __launch_bounds__(128)
attn_fwd_pipeline(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
                  const __nv_bfloat16* __restrict__ v, __nv_bfloat16* __restrict__ out, float* __restrict__ lse,
                  int Hq, int Hkv, int Sq, int Sk, int causal, float scale, float scale_log2) {
    constexpr int BR = 64, KT = D / 16, NT = BC / 8, OT = D / 8;
    __shared__ __align__(128) __nv_bfloat16 qs[BR * D];
    __shared__ __align__(128) __nv_bfloat16 ks[2][BC * D];
    __shared__ __align__(128) __nv_bfloat16 vs[2][BC * D];
    const int h = blockIdx.y, b = blockIdx.z, kvh = h / (Hq / Hkv);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4;
    const int row0 = blockIdx.x * BR, wrow = row0 + 16 * warp;
    const __nv_bfloat16* q_head = q + ((size_t)b * Hq + h) * Sq * D;
    const __nv_bfloat16* k_head = k + ((size_t)b * Hkv + kvh) * Sk * D;
    const __nv_bfloat16* v_head = v + ((size_t)b * Hkv + kvh) * Sk * D;
    const int lim[2] = {attn_visible(wrow + g, Sq, Sk, causal), attn_visible(wrow + g + 8, Sq, Sk, causal)};
    const int tiles = (attn_visible(min(row0 + BR, Sq) - 1, Sq, Sk, causal) + BC - 1) / BC;
    const int fewest = attn_visible(row0, Sq, Sk, causal);    // keys the block's first row sees: the fewest

    fa2_load_tile<BR, D>(qs, q_head, row0, Sq);                  // group 0: Q and the first K, V tile
    if (tiles > 0) {
        fa2_load_tile<BC, D>(ks[0], k_head, 0, Sk);
        fa2_load_tile<BC, D>(vs[0], v_head, 0, Sk);
    }
    cp_async_commit();
    SoftmaxState st[2] = {softmax_state_empty(), softmax_state_empty()};
    float o[OT][4];
    fa2_zero(o);
    unsigned qa[KT][4];
    for (int j = 0; j < tiles; ++j) {
        const int cur = j & 1;
        if (j + 1 < tiles) {                                     // the next tile's copies run during this one
            fa2_load_tile<BC, D>(ks[cur ^ 1], k_head, (j + 1) * BC, Sk);
            fa2_load_tile<BC, D>(vs[cur ^ 1], v_head, (j + 1) * BC, Sk);
        }
        cp_async_commit();                                       // (an empty group at the last tile)
        cp_async_wait<1>();                                      // everything but the newest group has landed
        __syncthreads();
        if (j == 0)
#pragma unroll
            for (int kk = 0; kk < KT; ++kk)                      // lanes 0-15: rows at k-chunk 2kk; 16-31: 2kk + 1
                ldmatrix_x4(qa[kk], qs + fa2_swz<D>(16 * warp + lane % 16, 16 * kk + 8 * (lane / 16)));
        float s[NT][4];
        fa2_zero(s);
#pragma unroll
        for (int kk = 0; kk < KT; ++kk)
#pragma unroll
            for (int n = 0; n < NT; n += 2) {                    // K rows of n-tiles n, n + 1 at k-chunks 2kk, 2kk + 1
                unsigned kb[4];
                const int m = lane / 8;
                ldmatrix_x4(kb, ks[cur] + fa2_swz<D>(8 * (n + m / 2) + lane % 8, 16 * kk + 8 * (m % 2)));
                mma_m16n8k16_bf16(s[n], qa[kk], kb[0], kb[1]);
                mma_m16n8k16_bf16(s[n + 1], qa[kk], kb[2], kb[3]);
            }
        if (!EDGE_MASK_ONLY || (j + 1) * BC > fewest) fa2_mask(s, j * BC, lim);
        fa2_softmax_tile<NT, OT>(s, st, o, scale_log2);
#pragma unroll
        for (int kk = 0; kk < BC / 16; ++kk) {
            unsigned pa[4];
            fa2_p_as_a<NT>(s, kk, pa);
#pragma unroll
            for (int n = 0; n < OT; n += 2) {                    // V rows 16kk.. (+8) at d-chunks n, n + 1, transposed
                unsigned vb[4];
                const int m = lane / 8;
                ldmatrix_x4_trans(vb, vs[cur] + fa2_swz<D>(16 * kk + 8 * (m % 2) + lane % 8, 8 * (n + m / 2)));
                mma_m16n8k16_bf16(o[n], pa, vb[0], vb[1]);
                mma_m16n8k16_bf16(o[n + 1], pa, vb[2], vb[3]);
            }
        }
        __syncthreads();                                         // stage cur is refilled at iteration j + 1
    }
    cp_async_wait<0>();
    fa2_store<OT>(o, st, out + ((size_t)b * Hq + h) * Sq * D, lse + ((size_t)b * Hq + h) * Sq, wrow, Sq, scale);
}
// [[/snippet]]
