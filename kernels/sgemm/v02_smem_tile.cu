// v02_smem_tile.cu: sgemm_v2_smem_tile, v1 with the K loop cut into BK-wide tiles staged in shared memory.
// v1 fetches every element of A and B from L1/L2 once per element of C that uses it (32 times per block);
// here a block of BM x BN threads copies a BM x BK tile of A and a BK x BN tile of B into shared memory once,
// coalesced, and every thread then reads its row and column there: each element of A and B leaves L2 once
// per block, and the block's 32-fold reuse moves from the caches into memory the block owns.
//
// C = alpha * A @ B + beta * C, row-major fp32, any M, N, K >= 1: tiles past an edge are filled with zeros
// (which add nothing to a dot product) and the stores are predicated; beta == 0 never reads C.

// [[snippet: sgemm_v2]]
// BS * BS threads: thread t takes column t % BS of the C tile (a warp's lanes: consecutive columns, as in v1)
// and row t / BS. blockIdx.x picks the column tile, blockIdx.y the row tile; BM = BN = BK = BS.
template <int BS>
__global__ void __launch_bounds__(BS * BS)
sgemm_v2_smem_tile(int M, int N, int K, float alpha, const float* __restrict__ A,
                   const float* __restrict__ B, float beta, float* __restrict__ C) {
    __shared__ float As[BS][BS];                     // As[m][k]: the block's rows of A, one BK slice
    __shared__ float Bs[BS][BS];                     // Bs[k][n]: the block's columns of B, one BK slice
    const int tx = threadIdx.x % BS, ty = threadIdx.x / BS;
    const int row = blockIdx.y * BS + ty;
    const int col = blockIdx.x * BS + tx;

    float acc = 0.f;
    for (int k0 = 0; k0 < K; k0 += BS) {
        // Each thread copies one element of each tile; a warp reads 32 consecutive floats of one row of A
        // and of B (128 B each). Zeros outside the matrices keep the inner loop free of tests.
        As[ty][tx] = (row < M && k0 + tx < K) ? A[row * K + k0 + tx] : 0.f;
        Bs[ty][tx] = (k0 + ty < K && col < N) ? B[(k0 + ty) * N + col] : 0.f;
        __syncthreads();                             // the tiles are whole before anyone reads them
#pragma unroll
        for (int k = 0; k < BS; ++k)
            acc += As[ty][k] * Bs[k][tx];            // As: one address per warp (broadcast); Bs: 32 banks
        __syncthreads();                             // everyone is done before the next tile overwrites
    }
    if (row < M && col < N) {
        const int c = row * N + col;
        C[c] = beta == 0.f ? alpha * acc : alpha * acc + beta * C[c];
    }
}
// [[/snippet]]
