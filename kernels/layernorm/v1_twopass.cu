// v1_twopass.cu: layernorm_v1_twopass and rmsnorm_v1_registers: the row held in
// registers (ITEMS values per thread; a warp per row for short rows, a block per row for long ones, a
// cluster of 8 blocks per row for the longest): x is read from memory once. LayerNorm: the mean, then the
// sum of squared deviations from the registers (two reductions per row); RMSNorm: the sum of squares.
// Template parameters: T (float or __nv_bfloat16), VEC (values per access: 1, or 16 bytes' worth), TPR
// (threads per row: 32 = a warp per row, else the whole block), THREADS (block size), ITEMS (values per
// thread, ITEMS % VEC == 0), CLUSTER (blocks per row). CLUSTER > 1 needs sm_90 (see norm_common.cuh).
#include "rows.cuh"

// The versions: the same row machinery with different statistics and access widths. The cluster
// shape is declared on the kernel (CLUSTER = 1: a cluster of one block, an ordinary launch).
// Registers: the scalar versions (one load per value) may use up to 128 registers per thread (one
// block of 512 per SM); the 16-byte versions aim at 1024 threads per SM (64 registers each) for
// ITEMS <= 32, and take 128 registers for the 64-value layout.

// [[snippet: layernorm_v1]]
template <typename T, int VEC, int TPR, int THREADS, int ITEMS, int CLUSTER>
__global__ void __launch_bounds__(THREADS, 1) NORM_CLUSTER_DIMS(CLUSTER)
layernorm_v1_twopass(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                     T* __restrict__ y, int rows, int n, float eps) {
    norm_rows<TWOPASS, T, VEC, TPR, THREADS, ITEMS, CLUSTER>(x, w, b, y, rows, n, eps);
}
// [[/snippet]]

// [[snippet: rmsnorm_v1]]
template <typename T, int VEC, int TPR, int THREADS, int ITEMS, int CLUSTER>
__global__ void __launch_bounds__(THREADS, 1) NORM_CLUSTER_DIMS(CLUSTER)
rmsnorm_v1_registers(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y, int rows, int n,
                     float eps) {
    norm_rows<RMS, T, VEC, TPR, THREADS, ITEMS, CLUSTER>(x, w, nullptr, y, rows, n, eps);
}
// [[/snippet]]
