// gemm_v4_post.cu: W4A16 GEMM v4 (parent v2): v2 with GEMV v4's arithmetic: mma on 128 + q, zero
// point and scale per group after the mma (marlin_stage_post). The body is v2's with that stage.
#include "marlin_common.cuh"

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

// v2's kernel body with marlin_stage_post in place of marlin_stage_mma.
// [[snippet: w4a16_gemm_v4]]
template <int MT, int NTW, int STAGES>
__device__ __forceinline__ void marlin_post_body(
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

        marlin_stage_post<MT, NTW>(smem + (i % STAGES) * S::BYTES, acc);
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

template <int MT, int NTW, int STAGES>
__global__ void __launch_bounds__(256, 2) w4a16_marlin_v4_post(   // v2 with marlin_stage_post
    const uint4* __restrict__ qmma, const unsigned* __restrict__ qzeros, const __nv_bfloat16* __restrict__ scales,
    const __nv_bfloat16* __restrict__ A, __nv_bfloat16* __restrict__ C, float* __restrict__ ws,
    unsigned* __restrict__ counters, int M, int K, int N) {
    marlin_post_body<MT, NTW, STAGES>(qmma, qzeros, scales, A, C, ws, counters, M, K, N);
}
// [[/snippet]]
