// gemm_v2_marlin.cu: W4A16 GEMM v2 (parent v1): Marlin's structure: one group per stage through a
// cp.async pipeline; A by ldmatrix from swizzled smem; split-K over CTAs.
#include "marlin_common.cuh"

// The kernel body: a cp.async pipeline of STAGES groups, marlin_stage_mma on each, split-K epilogue.
// [[snippet: w4a16_gemm_v2]]
template <int MT, int NTW, int STAGES>
__device__ __forceinline__ void marlin_body(
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

        marlin_stage_mma<MT, NTW>(smem + (i % STAGES) * S::BYTES, acc);
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
__global__ void __launch_bounds__(256, 2) w4a16_marlin(   // 2 CTAs per SM: up to 128 registers
    const uint4* __restrict__ qmma, const unsigned* __restrict__ qzeros, const __nv_bfloat16* __restrict__ scales,
    const __nv_bfloat16* __restrict__ A, __nv_bfloat16* __restrict__ C, float* __restrict__ ws,
    unsigned* __restrict__ counters, int M, int K, int N) {
    marlin_body<MT, NTW, STAGES>(qmma, qzeros, scales, A, C, ws, counters, M, K, N);
}
// [[/snippet]]
