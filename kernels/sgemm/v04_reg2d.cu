// v04_reg2d.cu: sgemm_v4_reg2d, v3's register blocking in two dimensions. A thread now computes a TM x TN
// block of C: at each k it loads TM values of As and TN values of Bs into registers and does their outer
// product, TM * TN FMAs for TM + TN loads (8 x 8: 64 FMAs for 16 loads, against v3's 8 for 9). The block
// tile grows to BM x BN = 128 x 128 with BK = 8, so each element loaded from L2 feeds 128 FMAs of the block.
//
// C = alpha * A @ B + beta * C, row-major fp32, any M, N, K >= 1 (zero-filled tiles, predicated stores);
// beta == 0 never reads C.

// [[snippet: sgemm_v4]]
// NT = (BM / TM) * (BN / TN) threads; thread t owns rows (t / (BN/TN)) * TM .. + TM and columns
// (t % (BN/TN)) * TN .. + TN of the tile. blockIdx.x picks the column tile, blockIdx.y the row tile.
template <int BM, int BN, int BK, int TM, int TN>
__global__ void __launch_bounds__((BM / TM) * (BN / TN))
sgemm_v4_reg2d(int M, int N, int K, float alpha, const float* __restrict__ A,
               const float* __restrict__ B, float beta, float* __restrict__ C) {
    constexpr int NT = (BM / TM) * (BN / TN);
    __shared__ float As[BM][BK];                     // As[m][k]
    __shared__ float Bs[BK][BN];                     // Bs[k][n]
    const int tid = threadIdx.x;
    const int tcol = tid % (BN / TN), trow = tid / (BN / TN);
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;

    float acc[TM][TN] = {};                          // TM x TN results, in registers
    float a[TM], b[TN];                              // one column of the A block, one row of the B block
    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int i = tid; i < BM * BK; i += NT) {
            const int m = i / BK, k = i % BK;
            As[m][k] = (m0 + m < M && k0 + k < K) ? A[(m0 + m) * K + k0 + k] : 0.f;
        }
        for (int i = tid; i < BK * BN; i += NT) {
            const int k = i / BN, n = i % BN;
            Bs[k][n] = (k0 + k < K && n0 + n < N) ? B[(k0 + k) * N + n0 + n] : 0.f;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
#pragma unroll
            for (int i = 0; i < TM; ++i) a[i] = As[trow * TM + i][k];
#pragma unroll
            for (int j = 0; j < TN; ++j) b[j] = Bs[k][tcol * TN + j];
#pragma unroll
            for (int i = 0; i < TM; ++i)             // the outer product: TM * TN FMAs, registers only
#pragma unroll
                for (int j = 0; j < TN; ++j)
                    acc[i][j] += a[i] * b[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int row = m0 + trow * TM + i;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int col = n0 + tcol * TN + j;
            if (row < M && col < N) {
                const int c = row * N + col;
                C[c] = beta == 0.f ? alpha * acc[i][j] : alpha * acc[i][j] + beta * C[c];
            }
        }
    }
}
// [[/snippet]]
