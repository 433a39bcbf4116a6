// v00_uncoalesced.cu: sgemm_v0_uncoalesced, the textbook first GEMM. One thread per element of C computes
// the dot product of a row of A and a column of B straight from global memory. The lanes of a warp take
// consecutive ROWS of C (threadIdx.x -> m): at every k the warp's 32 loads of A are K floats apart (32
// sectors), its load of B is one address (a broadcast), and its 32 stores of C are N floats apart.
//
// C = alpha * A @ B + beta * C, row-major fp32: A [M, K], B [K, N], C [M, N]; any M, N, K >= 1, the last
// row and column of blocks predicated (nothing padded). beta == 0 never reads C (as BLAS: C may hold NaN).
// Offsets are 32-bit: the host refuses matrices of 2^31 elements or more (kernels/sgemm/__init__.py).

// [[snippet: sgemm_v0]]
// Block (32, 32) covers a 32 x 32 tile of C: blockIdx.x picks the tile's rows, blockIdx.y its columns.
extern "C" __global__ void __launch_bounds__(1024)
sgemm_v0_uncoalesced(int M, int N, int K, float alpha, const float* __restrict__ A,
                     const float* __restrict__ B, float beta, float* __restrict__ C) {
    const int row = blockIdx.x * 32 + threadIdx.x;   // lanes 0..31 of a warp: 32 consecutive rows
    const int col = blockIdx.y * 32 + threadIdx.y;   // one column per warp
    if (row >= M || col >= N) return;                // tails: threads outside C do nothing

    float acc = 0.f;                                 // C[row, col] = sum_k A[row, k] * B[k, col]
    for (int k = 0; k < K; ++k)
        acc += A[row * K + k] * B[k * N + col];      // A: 32 rows, K floats apart; B: one address
    const int c = row * N + col;                     // the warp's 32 stores: N floats apart
    C[c] = beta == 0.f ? alpha * acc : alpha * acc + beta * C[c];
}
// [[/snippet]]
