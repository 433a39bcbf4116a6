// v05_vec4.cu: sgemm_v5_vec4, v4 with 16-byte accesses. Global loads of A and B and stores of C move 4
// floats per instruction (LDG.128 / STG.128: a quarter of the load instructions), and A is stored to shared
// memory transposed, As[k][m], so that a thread's TM values of one column of the A block are contiguous
// and come back as TM / 4 16-byte shared loads (LDS.128), as its TN values of a row of Bs do.
// Where K or N is not a multiple of 4, or A, B or C is not 16-byte aligned, the plan picks VEC = false:
// the same tiles and mapping, with four predicated 4-byte accesses instead of one (vec4.cuh).
//
// C = alpha * A @ B + beta * C, row-major fp32, any M, N, K >= 1 (zero-filled tiles, predicated stores);
// beta == 0 never reads C.
#include "vec4.cuh"

// [[snippet: sgemm_v5]]
// NT = (BM / TM) * (BN / TN) threads; thread t owns rows (t / (BN/TN)) * TM .. + TM and columns
// (t % (BN/TN)) * TN .. + TN of the tile. blockIdx.x picks the column tile, blockIdx.y the row tile.
template <int BM, int BN, int BK, int TM, int TN, bool VEC>
__global__ void __launch_bounds__((BM / TM) * (BN / TN))
sgemm_v5_vec4(int M, int N, int K, float alpha, const float* __restrict__ A,
              const float* __restrict__ B, float beta, float* __restrict__ C) {
    constexpr int NT = (BM / TM) * (BN / TN);
    static_assert(BK % 4 == 0 && BN % 4 == 0 && TM % 4 == 0 && TN % 4 == 0, "4-wide groups");
    __shared__ __align__(16) float As[BK][BM];       // As[k][m]: A transposed on its way in
    __shared__ __align__(16) float Bs[BK][BN];       // Bs[k][n]
    const int tid = threadIdx.x;
    const int tcol = tid % (BN / TN), trow = tid / (BN / TN);
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;

    float acc[TM][TN] = {};
    float a[TM], b[TN];
    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int i = tid; i < BM * BK / 4; i += NT) {      // 4 consecutive k of one row of A
            const int m = i / (BK / 4), k = (i % (BK / 4)) * 4;
            const float4 v = load4<VEC>(A, m0 + m, M, k0 + k, K, K);
            As[k + 0][m] = v.x; As[k + 1][m] = v.y; As[k + 2][m] = v.z; As[k + 3][m] = v.w;
        }
        for (int i = tid; i < BK * BN / 4; i += NT) {      // 4 consecutive n of one row of B
            const int k = i / (BN / 4), n = (i % (BN / 4)) * 4;
            *reinterpret_cast<float4*>(&Bs[k][n]) = load4<VEC>(B, k0 + k, K, n0 + n, N, N);
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
#pragma unroll
            for (int i = 0; i < TM; i += 4) {
                const float4 v = *reinterpret_cast<const float4*>(&As[k][trow * TM + i]);
                a[i] = v.x; a[i + 1] = v.y; a[i + 2] = v.z; a[i + 3] = v.w;
            }
#pragma unroll
            for (int j = 0; j < TN; j += 4) {
                const float4 v = *reinterpret_cast<const float4*>(&Bs[k][tcol * TN + j]);
                b[j] = v.x; b[j + 1] = v.y; b[j + 2] = v.z; b[j + 3] = v.w;
            }
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j)
                    acc[i][j] += a[i] * b[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; j += 4)
            store4<VEC>(C, m0 + trow * TM + i, M, n0 + tcol * TN + j, N,
                        make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]), alpha, beta);
}
// [[/snippet]]
