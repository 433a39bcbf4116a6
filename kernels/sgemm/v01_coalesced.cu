// v01_coalesced.cu: sgemm_v1_coalesced, v0 with threadIdx.x and threadIdx.y swapped. The lanes of a warp
// now take consecutive COLUMNS of C: at every k the warp's load of A is one address (a broadcast), its 32
// loads of B are 128 contiguous bytes (4 sectors), and its 32 stores of C are 128 contiguous bytes.
// The grid, the blocks and the tile each block covers are v0's: only which 32 threads form a warp changes.
//
// C = alpha * A @ B + beta * C, row-major fp32, any M, N, K >= 1 (predicated tails); beta == 0 never reads C.

// [[snippet: sgemm_v1]]
// Block (32, 32) covers a 32 x 32 tile of C: blockIdx.x picks the tile's rows, blockIdx.y its columns.
extern "C" __global__ void __launch_bounds__(1024)
sgemm_v1_coalesced(int M, int N, int K, float alpha, const float* __restrict__ A,
                   const float* __restrict__ B, float beta, float* __restrict__ C) {
    const int row = blockIdx.x * 32 + threadIdx.y;   // one row per warp
    const int col = blockIdx.y * 32 + threadIdx.x;   // lanes 0..31 of a warp: 32 consecutive columns
    if (row >= M || col >= N) return;                // tails: threads outside C do nothing

    float acc = 0.f;                                 // C[row, col] = sum_k A[row, k] * B[k, col]
    for (int k = 0; k < K; ++k)
        acc += A[row * K + k] * B[k * N + col];      // A: one address; B: 128 contiguous bytes
    const int c = row * N + col;                     // the warp's 32 stores: 128 contiguous bytes
    C[c] = beta == 0.f ? alpha * acc : alpha * acc + beta * C[c];
}
// [[/snippet]]
