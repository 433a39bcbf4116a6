// v2_welford.cu: layernorm_v2_welford: v1 with the statistics as Welford states:
// each thread updates (n, mean, M2) value by value, warps, blocks and clusters merge states (Chan): one
// reduction per row.
// Template parameters: T (float or __nv_bfloat16), VEC (values per access: 1, or 16 bytes' worth), TPR
// (threads per row: 32 = a warp per row, else the whole block), THREADS (block size), ITEMS (values per
// thread, ITEMS % VEC == 0), CLUSTER (blocks per row). CLUSTER > 1 needs sm_90 (see norm_common.cuh).
#include "rows.cuh"

// [[snippet: layernorm_v2]]
template <typename T, int VEC, int TPR, int THREADS, int ITEMS, int CLUSTER>
__global__ void __launch_bounds__(THREADS, 1) NORM_CLUSTER_DIMS(CLUSTER)
layernorm_v2_welford(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                     T* __restrict__ y, int rows, int n, float eps) {
    norm_rows<WELFORD, T, VEC, TPR, THREADS, ITEMS, CLUSTER>(x, w, b, y, rows, n, eps);
}
// [[/snippet]]
