// v03_reg1d.cu: sgemm_v3_reg1d, v2 with 1-D register blocking. In v2 every FMA costs two shared-memory
// loads (one of As, one of Bs), so the shared-memory pipe, not the FMA units, sets the pace. Here a thread
// computes TM results down one column of C: at each k it loads one value of Bs into a register and reuses
// it for TM FMAs against TM values of As (a broadcast: the warp's lanes share their rows). Loads per FMA fall
// from 2 to (1 + TM) / TM, and the block tile grows to BM x BN = 64 x 64 with BM * BN / TM threads.
//
// C = alpha * A @ B + beta * C, row-major fp32, any M, N, K >= 1 (zero-filled tiles, predicated stores);
// beta == 0 never reads C.

// [[snippet: sgemm_v3]]
// NT = BM * BN / TM threads; thread t owns column t % BN of the tile and rows (t / BN) * TM .. + TM.
// blockIdx.x picks the column tile, blockIdx.y the row tile.
template <int BM, int BN, int BK, int TM>
__global__ void __launch_bounds__(BM * BN / TM)
sgemm_v3_reg1d(int M, int N, int K, float alpha, const float* __restrict__ A,
               const float* __restrict__ B, float beta, float* __restrict__ C) {
    constexpr int NT = BM * BN / TM;
    static_assert(BN % 32 == 0, "a warp's lanes must share their rows, so As reads are broadcasts");
    __shared__ float As[BM][BK];                     // As[m][k]
    __shared__ float Bs[BK][BN];                     // Bs[k][n]
    const int tid = threadIdx.x;
    const int tcol = tid % BN, trow = tid / BN;      // this thread: C tile column tcol, rows trow*TM ..
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;

    float acc[TM] = {};                              // TM results, in registers
    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int i = tid; i < BM * BK; i += NT) {    // consecutive threads: consecutive k of one row of A
            const int m = i / BK, k = i % BK;
            As[m][k] = (m0 + m < M && k0 + k < K) ? A[(m0 + m) * K + k0 + k] : 0.f;
        }
        for (int i = tid; i < BK * BN; i += NT) {    // consecutive threads: consecutive n of one row of B
            const int k = i / BN, n = i % BN;
            Bs[k][n] = (k0 + k < K && n0 + n < N) ? B[(k0 + k) * N + n0 + n] : 0.f;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            const float b = Bs[k][tcol];             // one load of B, reused TM times
#pragma unroll
            for (int i = 0; i < TM; ++i)
                acc[i] += As[trow * TM + i][k] * b;
        }
        __syncthreads();
    }
    const int col = n0 + tcol;
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int row = m0 + trow * TM + i;
        if (row < M && col < N) {
            const int c = row * N + col;
            C[c] = beta == 0.f ? alpha * acc[i] : alpha * acc[i] + beta * C[c];
        }
    }
}
// [[/snippet]]
