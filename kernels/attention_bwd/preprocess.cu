// preprocess.cu: the small kernels around the FlashAttention-2 backward (chapter 16), shared by every version.
//   attn_bwd_preprocess: per query row, delta = rowsum(dO o O) and lse in base 2, into workspaces padded to whole
//                        query tiles; optionally zeroes the fp32 dQ accumulator (v0's atomics add into it).
//   attn_bwd_dq_convert: dQ = scale * accumulator, rounded to bf16 (v0's last step).
#include "fa2_bwd_common.cuh"

// [[snippet: attn_bwd_preprocess]]
// Eight threads a row (a block of 256: 32 rows), each reading D / 8 elements of O and dO as 16-byte vectors.
// Rows of the padding (i >= Sq; in a varlen batch, past the row's own sequence) get delta = 0 and lse_log2 = +inf, and so do rows that saw no key (lse = -inf):
// then P = exp2(s scale_log2 - lse_log2) is exactly 0 for them whatever s is, and the main kernels need no test
// for either case. The grid covers B Hq Sq_pad rows exactly (Sq_pad a multiple of 128; varlen: of the longest
// sequence), so every thread of a row's quad-pair takes part in the shuffles. The workspaces are [B, Hq, Sq_pad]
// either way; cu_q (nullptr: dense) only moves where O, dO, lse and the dQ accumulator are read and zeroed.
template <int D, bool ZERO_DQ>
__global__ void __launch_bounds__(256)
attn_bwd_preprocess(const __nv_bfloat16* __restrict__ out, const __nv_bfloat16* __restrict__ dout,
                    const float* __restrict__ lse, float* __restrict__ lse_log2, float* __restrict__ delta,
                    float* __restrict__ dq_accum, int Sq, int Sq_pad, const int* __restrict__ cu_q, int Hq, int Tq) {
    constexpr int PER = D / 8;                                       // elements a thread reads: 1 or 2 vectors
    const int row = blockIdx.x * 32 + threadIdx.x / 8, part = threadIdx.x % 8;
    const int bh = row / Sq_pad, i = row % Sq_pad;
    const BwdSeq sq = bwd_seq<D>(cu_q, bh / Hq, bh % Hq, Hq, Sq, Tq);   // varlen: this row's sequence
    const size_t src = sq.row0 + (size_t)i * sq.stride + part * PER;
    float d = 0.f;
    if (i < sq.S) {
#pragma unroll
        for (int c = 0; c < PER / 8; ++c) {
            const uint4 o4 = *reinterpret_cast<const uint4*>(out + src + 8 * c);
            const uint4 g4 = *reinterpret_cast<const uint4*>(dout + src + 8 * c);
            const __nv_bfloat16* o = reinterpret_cast<const __nv_bfloat16*>(&o4);
            const __nv_bfloat16* g = reinterpret_cast<const __nv_bfloat16*>(&g4);
#pragma unroll
            for (int e = 0; e < 8; ++e) d = fmaf(__bfloat162float(o[e]), __bfloat162float(g[e]), d);
        }
    }
    d += __shfl_xor_sync(0xffffffffu, d, 1);
    d += __shfl_xor_sync(0xffffffffu, d, 2);
    d += __shfl_xor_sync(0xffffffffu, d, 4);
    if (part == 0) {
        const float l = i < sq.S ? lse[sq.lse0 + i] : SOFTMAX_NEG_INF;
        delta[row] = d;
        lse_log2[row] = l == SOFTMAX_NEG_INF ? -SOFTMAX_NEG_INF : l * SOFTMAX_LOG2E;
    }
    if constexpr (ZERO_DQ) {
        if (i < sq.S) {
            float4* acc = reinterpret_cast<float4*>(dq_accum + src);
#pragma unroll
            for (int c = 0; c < PER / 4; ++c) acc[c] = make_float4(0.f, 0.f, 0.f, 0.f);
        }
    }
}
// [[/snippet]]

// Eight elements a thread and step: two float4 loads, one 16-byte store. n8 = elements / 8 (D is a multiple of 8).
extern "C" __global__ void __launch_bounds__(256)
attn_bwd_dq_convert(const float* __restrict__ acc, __nv_bfloat16* __restrict__ dq, long long n8, float scale) {
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < n8; e += (long long)gridDim.x * blockDim.x) {
        const float4 a = reinterpret_cast<const float4*>(acc)[2 * e];
        const float4 b = reinterpret_cast<const float4*>(acc)[2 * e + 1];
        reinterpret_cast<uint4*>(dq)[e] = make_uint4(pack_bf16x2(a.x * scale, a.y * scale),
                                                     pack_bf16x2(a.z * scale, a.w * scale),
                                                     pack_bf16x2(b.x * scale, b.y * scale),
                                                     pack_bf16x2(b.z * scale, b.w * scale));
    }
}
