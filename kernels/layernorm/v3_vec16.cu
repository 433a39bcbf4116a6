// v3_vec16.cu: layernorm_v3_vec16 (v2) and rmsnorm_v2_vec16 (RMSNorm v1) with
// 16-byte loads and stores (4 fp32 or 8 bf16 per access).
// Template parameters: T (float or __nv_bfloat16), VEC (values per access: 1, or 16 bytes' worth), TPR
// (threads per row: 32 = a warp per row, else the whole block), THREADS (block size), ITEMS (values per
// thread, ITEMS % VEC == 0), CLUSTER (blocks per row). CLUSTER > 1 needs sm_90 (see norm_common.cuh).
#include "rows.cuh"

// [[snippet: layernorm_v3]]
// Launched with VEC = 16 / sizeof(T): one 16-byte load or store moves 4 fp32 or 8 bf16 values.
template <typename T, int VEC, int TPR, int THREADS, int ITEMS, int CLUSTER>
__global__ void __launch_bounds__(THREADS, ITEMS >= 64 ? 1 : 1024 / THREADS) NORM_CLUSTER_DIMS(CLUSTER)
layernorm_v3_vec16(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                   T* __restrict__ y, int rows, int n, float eps) {
    static_assert(VEC * sizeof(T) == 16, "v3 moves 16 bytes per access");
    norm_rows<WELFORD, T, VEC, TPR, THREADS, ITEMS, CLUSTER>(x, w, b, y, rows, n, eps);
}
// [[/snippet]]

// [[snippet: rmsnorm_v2]]
template <typename T, int VEC, int TPR, int THREADS, int ITEMS, int CLUSTER>
__global__ void __launch_bounds__(THREADS, ITEMS >= 64 ? 1 : 1024 / THREADS) NORM_CLUSTER_DIMS(CLUSTER)
rmsnorm_v2_vec16(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y, int rows, int n,
                 float eps) {
    static_assert(VEC * sizeof(T) == 16, "v2 moves 16 bytes per access");
    norm_rows<RMS, T, VEC, TPR, THREADS, ITEMS, CLUSTER>(x, w, nullptr, y, rows, n, eps);
}
// [[/snippet]]
