// v06_swizzle.cu: sgemm_v6_swizzle, v5 without its shared-memory bank conflicts. One version with a
// layout switch, LAYOUT = 1 (padding) or 2 (XOR swizzle), so the chapter can put both beside v5 in the
// counters (l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st / _op_ld).
//
// Where v5 conflicts, with 128 x 128 x 8 tiles and 256 threads:
// - the transposed stores into As: a warp's 32 threads write 16 rows m of A at two k groups (k and k + 4);
//   As[k][m] and As[k + 4][m] lie 4 * 128 floats apart, in the same bank: every store is 2-way;
// - the LDS.128 reads of Bs: thread column t reads floats 8t .. 8t + 3, so of the 8 threads that share one
//   128-bit phase, t and t + 4 hit the same four banks: 2-way.
// The fixes:
// - As, LAYOUT = 1: each row of As is BM + 32 / BK floats long; the k + 4 row starts 16 banks further on.
//   The pad must keep rows 16-byte aligned for the LDS.128 reads, so it works for BK = 8 only.
// - As, LAYOUT = 2: no extra memory; element (k, m) is stored at column m ^ ((k / 4) * (128 / BK)) of row k.
//   128 / BK is the number of rows of A one warp writes at once, so each k group lands in banks of its own;
//   the XOR constant is a multiple of 4 below 32, so a 4-float group stays whole and aligned, and each row
//   is permuted within itself (any BK from 4 to 32).
// - Bs: a thread's TN columns become TN / 4 groups of 4, group g at column 4t + g * BN / (TN / 4): the 16
//   threads of a row read 64 consecutive floats per group, conflict-free.
//
// C = alpha * A @ B + beta * C, row-major fp32, any M, N, K >= 1 (zero-filled tiles, predicated stores);
// beta == 0 never reads C.
#include "vec4.cuh"
#include "atile.cuh"        // ATile: where element (k, m) of the transposed A tile lives

// [[snippet: sgemm_v6]]
// NT = (BM / TM) * (BN / TN) threads; thread t owns rows (t / (BN/TN)) * TM .. + TM of the tile and the TN / 4
// column groups (t % (BN/TN)) * 4 + g * BN / (TN / 4). blockIdx.x picks the column tile, blockIdx.y the row tile.
template <int BM, int BN, int BK, int TM, int TN, int LAYOUT, bool VEC>
__global__ void __launch_bounds__((BM / TM) * (BN / TN))
sgemm_v6_swizzle(int M, int N, int K, float alpha, const float* __restrict__ A,
                 const float* __restrict__ B, float beta, float* __restrict__ C) {
    constexpr int NT = (BM / TM) * (BN / TN);
    constexpr int GN = BN / (TN / 4);                // distance between a thread's column groups
    using AT = ATile<BM, BK, LAYOUT>;
    static_assert(BK % 4 == 0 && BN % 4 == 0 && TM % 4 == 0 && TN % 4 == 0, "4-wide groups");
    __shared__ __align__(16) float As[AT::SIZE];     // transposed A tile, padded or swizzled
    __shared__ __align__(16) float Bs[BK][BN];       // Bs[k][n]
    const int tid = threadIdx.x;
    const int tcol = tid % (BN / TN), trow = tid / (BN / TN);
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;

    float acc[TM][TN] = {};
    float a[TM], b[TN];
    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int i = tid; i < BM * BK / 4; i += NT) {
            const int m = i / (BK / 4), k = (i % (BK / 4)) * 4;
            const float4 v = load4<VEC>(A, m0 + m, M, k0 + k, K, K);
            As[AT::at(k + 0, m)] = v.x; As[AT::at(k + 1, m)] = v.y;
            As[AT::at(k + 2, m)] = v.z; As[AT::at(k + 3, m)] = v.w;
        }
        for (int i = tid; i < BK * BN / 4; i += NT) {
            const int k = i / (BN / 4), n = (i % (BN / 4)) * 4;
            *reinterpret_cast<float4*>(&Bs[k][n]) = load4<VEC>(B, k0 + k, K, n0 + n, N, N);
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
#pragma unroll
            for (int i = 0; i < TM; i += 4) {
                const float4 v = *reinterpret_cast<const float4*>(&As[AT::at(k, trow * TM + i)]);
                a[i] = v.x; a[i + 1] = v.y; a[i + 2] = v.z; a[i + 3] = v.w;
            }
#pragma unroll
            for (int j = 0; j < TN; j += 4) {
                const float4 v = *reinterpret_cast<const float4*>(&Bs[k][tcol * 4 + (j / 4) * GN]);
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
            store4<VEC>(C, m0 + trow * TM + i, M, n0 + tcol * 4 + (j / 4) * GN, N,
                        make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]), alpha, beta);
}
// [[/snippet]]
