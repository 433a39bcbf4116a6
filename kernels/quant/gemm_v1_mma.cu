// gemm_v1_mma.cu: W4A16 GEMM v1: shuffled B fragments dequantized in registers; 8 warps split K;
// weights prefetched one chunk ahead (w4a16_mma_m16 / _m32).
#include "mma_frags.cuh"

// [[snippet: w4a16_mma]]
template <int MT>
__device__ __forceinline__ void w4a16_mma_body(
    const uint4* __restrict__ qmma,             // [N/16, K/64, 32, 4] int32 as [N/16, K/64, 32] uint4
    const unsigned* __restrict__ qzeros,        // [K/128, N/8]
    const __nv_bfloat16* __restrict__ scales,   // [K/128, N]
    const __nv_bfloat16* __restrict__ A,        // [M, K]
    __nv_bfloat16* __restrict__ C,              // [M, N]
    int M, int K, int N) {
    __shared__ float red[MT * 16][TC_NT * 16];  // [32 rows, 64 columns] fp32: the warps' sum
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int nt0 = blockIdx.x * TC_NT;         // first n16 tile of this block
    const int m0 = blockIdx.y * 16 * MT;        // first row of this block
    const int ntiles = N / 16, kchunks = K / 64, groups = K / GROUP;
    for (int i = threadIdx.x; i < MT * 16 * TC_NT * 16; i += blockDim.x) (&red[0][0])[i] = 0.f;

    float acc[MT][TC_NT][2][4];                 // [m16 tile][n16 tile][n8 half][fragment]
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < TC_NT; ++nt)
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[mt][nt][h][e] = 0.f;

#define LOAD_CHUNK(KC, WQ)                                                                           \
    _Pragma("unroll") for (int nt = 0; nt < TC_NT; ++nt)                                             \
        WQ[nt] = (nt0 + nt < ntiles) ? __ldcs(qmma + ((size_t)(nt0 + nt) * kchunks + (KC)) * 32 + lane) \
                                     : make_uint4(0u, 0u, 0u, 0u);
    uint4 wq[TC_NT], wq_next[TC_NT];                  // [4 n16 tiles] x 4 k16 words, this chunk and the next
    if (warp < groups) { LOAD_CHUNK(2 * warp, wq) }

    for (int grp = warp; grp < groups; grp += TC_WARPS) {
        // (s, s) and (128 + z, 128 + z) of this lane's columns g and g + 8 in each n16 tile
        __nv_bfloat162 sb[TC_NT][2], zb[TC_NT][2];
#pragma unroll
        for (int nt = 0; nt < TC_NT; ++nt) {
            const int n16 = min(nt0 + nt, ntiles - 1);   // clamped in bounds; tiles past N are never stored
            const int ca = n16 * 16 + g;
            const __nv_bfloat16 sa = scales[(size_t)grp * N + ca], sc = scales[(size_t)grp * N + ca + 8];
            sb[nt][0] = __halves2bfloat162(sa, sa);
            sb[nt][1] = __halves2bfloat162(sc, sc);
            const unsigned zw0 = qzeros[(size_t)grp * (N / 8) + 2 * n16];       // z of columns 16 n16 .. +7
            const unsigned zw1 = qzeros[(size_t)grp * (N / 8) + 2 * n16 + 1];   // z of columns 16 n16 + 8 .. +15
            zb[nt][0] = u32_as_bf162(bf16x2_biased_zero((zw0 >> (4 * g)) & 0xfu));
            zb[nt][1] = u32_as_bf162(bf16x2_biased_zero((zw1 >> (4 * g)) & 0xfu));
        }
#pragma unroll
        for (int half = 0; half < 2; ++half) {                   // the two k64 chunks of the group
            const int kc = 2 * grp + half;
            const int kc_next = half == 0 ? kc + 1 : kc + 2 * TC_WARPS - 1;
            if (kc_next < kchunks) { LOAD_CHUNK(kc_next, wq_next) }   // prefetch while this chunk computes
#pragma unroll
            for (int j = 0; j < 4; ++j) {                        // k16 tiles of the chunk
                const int k0 = kc * 64 + j * 16;
                unsigned a[MT][4];                               // A fragments, rows beyond M read as 0
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    const int r0 = m0 + mt * 16 + g, r1 = r0 + 8;
                    const unsigned* A0 = reinterpret_cast<const unsigned*>(A + (size_t)min(r0, M - 1) * K + k0 + 2 * t);
                    const unsigned* A1 = reinterpret_cast<const unsigned*>(A + (size_t)min(r1, M - 1) * K + k0 + 2 * t);
                    a[mt][0] = r0 < M ? __ldg(A0) : 0u;
                    a[mt][1] = r1 < M ? __ldg(A1) : 0u;
                    a[mt][2] = r0 < M ? __ldg(A0 + 4) : 0u;              // + 8 bf16
                    a[mt][3] = r1 < M ? __ldg(A1 + 4) : 0u;
                }
#pragma unroll
                for (int nt = 0; nt < TC_NT; ++nt) {
                    const unsigned w = j == 0 ? wq[nt].x : j == 1 ? wq[nt].y : j == 2 ? wq[nt].z : wq[nt].w;
                    dequant_mma_n16(w, zb[nt], sb[nt], a, acc, nt);
                }
            }
#pragma unroll
            for (int nt = 0; nt < TC_NT; ++nt) wq[nt] = wq_next[nt];
        }
    }
    __syncthreads();                                             // red is zeroed
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < TC_NT; ++nt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int col = nt * 16 + h * 8 + 2 * t, row = mt * 16 + g;
                atomicAdd(&red[row][col], acc[mt][nt][h][0]);
                atomicAdd(&red[row][col + 1], acc[mt][nt][h][1]);
                atomicAdd(&red[row + 8][col], acc[mt][nt][h][2]);
                atomicAdd(&red[row + 8][col + 1], acc[mt][nt][h][3]);
            }
    __syncthreads();
    for (int i = threadIdx.x; i < MT * 16 * TC_NT * 16; i += blockDim.x) {
        const int row = i / (TC_NT * 16), col = i % (TC_NT * 16);
        const int m = m0 + row, n = nt0 * 16 + col;
        if (m < M && n < N) C[(size_t)m * N + n] = __float2bfloat16_rn(red[row][col]);
    }
}

extern "C" __global__ void __launch_bounds__(256, 1) w4a16_mma_m16(
    const uint4* __restrict__ qmma, const unsigned* __restrict__ qzeros, const __nv_bfloat16* __restrict__ scales,
    const __nv_bfloat16* __restrict__ A, __nv_bfloat16* __restrict__ C, int M, int K, int N) {
    w4a16_mma_body<1>(qmma, qzeros, scales, A, C, M, K, N);
}
extern "C" __global__ void __launch_bounds__(256, 1) w4a16_mma_m32(
    const uint4* __restrict__ qmma, const unsigned* __restrict__ qzeros, const __nv_bfloat16* __restrict__ scales,
    const __nv_bfloat16* __restrict__ A, __nv_bfloat16* __restrict__ C, int M, int K, int N) {
    w4a16_mma_body<2>(qmma, qzeros, scales, A, C, M, K, N);
}
// [[/snippet]]
