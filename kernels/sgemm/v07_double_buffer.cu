// v07_double_buffer.cu: sgemm_v7_double_buffer, v6 (XOR-swizzled As) with two shared-memory stages. In v6 a
// block loads a tile, waits at a barrier, computes, waits again: while the loads of the next tile are in
// flight its warps have nothing to do, and the 16 warps of 2 blocks per SM are too few to hide that. Here
// the loads of tile t + 1 are issued into registers before tile t is computed, so their latency runs under
// the 8 x 8 x BK FMAs; after computing, the registers go to the other shared stage, and one barrier per
// tile (not two) separates the writes of a stage from its next reads.
//
// C = alpha * A @ B + beta * C, row-major fp32, any M, N, K >= 1 (zero-filled tiles, predicated stores);
// beta == 0 never reads C.
#include "stage.cuh"          // Stage: the slice in flight (load) and its write to shared memory (stash)

// [[snippet: sgemm_v7]]
// v6's threads, tiles and mapping (XOR-swizzled As, column groups of 4); two stages of As and Bs.
template <int BM, int BN, int BK, int TM, int TN, bool VEC>
__global__ void __launch_bounds__((BM / TM) * (BN / TN))
sgemm_v7_double_buffer(int M, int N, int K, float alpha, const float* __restrict__ A,
                       const float* __restrict__ B, float beta, float* __restrict__ C) {
    constexpr int NT = (BM / TM) * (BN / TN);
    constexpr int GN = BN / (TN / 4);
    using St = Stage<BM, BN, BK, NT, VEC>;
    using AT = typename St::AT;
    static_assert(BK % 4 == 0 && BN % 4 == 0 && TM % 4 == 0 && TN % 4 == 0, "4-wide groups");
    __shared__ __align__(16) float As[2][St::A_SIZE];   // two stages of the transposed, swizzled A slice
    __shared__ __align__(16) float Bs[2][St::B_SIZE];   // two stages of the B slice, row-major
    const int tid = threadIdx.x;
    const int tcol = tid % (BN / TN), trow = tid / (BN / TN);
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int tiles = (K + BK - 1) / BK;

    St next;                                         // the next slice, in flight in registers
    float acc[TM][TN] = {};
    float a[TM], b[TN];
    next.load(A, B, M, N, K, m0, n0, 0, tid);
    next.stash(As[0], Bs[0], tid);
    __syncthreads();
    for (int t = 0; t < tiles; ++t) {
        const int s = t & 1;
        if (t + 1 < tiles) next.load(A, B, M, N, K, m0, n0, (t + 1) * BK, tid);   // waited for at stash()
#pragma unroll
        for (int k = 0; k < BK; ++k) {
#pragma unroll
            for (int i = 0; i < TM; i += 4) {
                const float4 v = *reinterpret_cast<const float4*>(&As[s][AT::at(k, trow * TM + i)]);
                a[i] = v.x; a[i + 1] = v.y; a[i + 2] = v.z; a[i + 3] = v.w;
            }
#pragma unroll
            for (int j = 0; j < TN; j += 4) {
                const float4 v = *reinterpret_cast<const float4*>(&Bs[s][k * BN + tcol * 4 + (j / 4) * GN]);
                b[j] = v.x; b[j + 1] = v.y; b[j + 2] = v.z; b[j + 3] = v.w;
            }
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j)
                    acc[i][j] += a[i] * b[j];
        }
        // Stage s ^ 1 was last read in iteration t - 1, and every thread has passed that iteration's
        // barrier, so it can be overwritten now; this iteration's barrier orders the writes before t + 1 reads.
        if (t + 1 < tiles) next.stash(As[s ^ 1], Bs[s ^ 1], tid);
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
