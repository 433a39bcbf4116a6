// v00_scalar.cu: FlashAttention forward v0 (chapter 15), on CUDA cores: the tiled algorithm with the online
// softmax, one thread per query row. A block of BR threads owns BR rows of one (batch, query head); it walks the
// keys in tiles of BC rows, which the block stages in shared memory with their values; each thread scores its row
// against the tile, advances its softmax state (m, l) by the tile's maximum, rescales its output row by
// alpha = e^{m_old - m_new} and adds the tile's p v. S and P never leave the thread: this is the IO-aware idea
// (Dao et al. 2022, Algorithm 1) before any tensor core.
//
// q [B, Hq, Sq, D], k and v [B, Hkv, Sk, D], out [B, Hq, Sq, D] bf16, lse [B, Hq, Sq] fp32 (natural log of the
// row's sum of e^{scale s}); query head h reads key/value head h / (Hq / Hkv) (GQA, MQA). Causal masking is
// bottom-right aligned as in FlashAttention >= 2.1: query i sees keys j <= i + Sk - Sq, so a row with
// i + Sk - Sq < 0 sees none and gets out = 0, lse = -inf. The plan checks sizes (kernels/attention).
#include <cuda_bf16.h>

#include "online_softmax.cuh"

// [[snippet: attn_fwd_v0]]
template <int D, int BR, int BC>
__global__ void __launch_bounds__(BR)
attn_fwd_scalar(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
                const __nv_bfloat16* __restrict__ v, __nv_bfloat16* __restrict__ out, float* __restrict__ lse,
                int Hq, int Hkv, int Sq, int Sk, int causal, float scale, float scale_log2) {
    // Q rows padded by 2 bf16 (one 32-bit word): thread t reads its row at word t (D / 2 + 1) + d / 2, a
    // different bank for every t. K and V rows are read by all threads at once (broadcasts): no padding.
    __shared__ __nv_bfloat16 qs[BR][D + 2];
    __shared__ __nv_bfloat16 ks[BC][D];
    __shared__ __nv_bfloat16 vs[BC][D];
    const int t = threadIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int kvh = h / (Hq / Hkv);
    const int row0 = blockIdx.x * BR, i = row0 + t;
    const size_t q_head = ((size_t)b * Hq + h) * Sq, kv_head = ((size_t)b * Hkv + kvh) * Sk;
    // keys this row sees: j < limit (bottom-right causal alignment); the block's tiles cover its last row's
    const int shift = Sk - Sq;
    const int limit = i >= Sq ? 0 : causal ? max(0, min(Sk, i + shift + 1)) : Sk;
    const int block_limit = causal ? max(0, min(Sk, min(row0 + BR, Sq) - 1 + shift + 1)) : Sk;
    if (i < Sq)
        for (int d = 0; d < D; ++d) qs[t][d] = q[(q_head + i) * D + d];

    SoftmaxState st = softmax_state_empty();
    float o[D];
#pragma unroll
    for (int d = 0; d < D; ++d) o[d] = 0.f;
    for (int j0 = 0; j0 < block_limit; j0 += BC) {
        __syncthreads();                                     // the previous tile is no longer read
        for (int e = t; e < BC * D; e += BR) {               // stage K and V rows j0 .. j0 + BC - 1 (zeros past Sk)
            const int r = e / D, d = e % D;
            const bool in = j0 + r < Sk;
            ks[r][d] = in ? k[(kv_head + j0 + r) * D + d] : __float2bfloat16(0.f);
            vs[r][d] = in ? v[(kv_head + j0 + r) * D + d] : __float2bfloat16(0.f);
        }
        __syncthreads();
        float s[BC], tile_max = SOFTMAX_NEG_INF;
#pragma unroll
        for (int c = 0; c < BC; ++c) {                       // raw scores q . k; masked keys are -inf
            float acc = 0.f;
            for (int d = 0; d < D; ++d) acc += __bfloat162float(qs[t][d]) * __bfloat162float(ks[c][d]);
            s[c] = j0 + c < limit ? acc : SOFTMAX_NEG_INF;
            tile_max = fmaxf(tile_max, s[c]);
        }
        const float alpha = softmax_state_advance(st, tile_max, scale_log2);
        const float m = softmax_safe_max(st.m);
#pragma unroll
        for (int d = 0; d < D; ++d) o[d] *= alpha;
#pragma unroll
        for (int c = 0; c < BC; ++c) {
            const float p = softmax_exp(s[c], m, scale_log2);
            st.l += p;
#pragma unroll
            for (int d = 0; d < D; ++d) o[d] += p * __bfloat162float(vs[c][d]);
        }
    }
    if (i >= Sq) return;
    const float inv = st.l > 0.f ? 1.f / st.l : 0.f;         // a row that saw no key: out = 0
#pragma unroll
    for (int d = 0; d < D; ++d) out[(q_head + i) * D + d] = __float2bfloat16(o[d] * inv);
    lse[q_head + i] = st.l > 0.f ? st.m * scale + logf(st.l) : SOFTMAX_NEG_INF;
}
// [[/snippet]]
