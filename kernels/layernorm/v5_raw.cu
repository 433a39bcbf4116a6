// v5_raw.cu: layernorm_v5_raw (v4) and rmsnorm_v4_raw (RMSNorm v3) keeping each
// 16-byte chunk raw (4 registers whatever the dtype: 8 bf16 values where v4 widens them to 8 fp32
// registers), unpacked in every pass; w and b loaded a group of chunks at a time (the first group before
// the reduction), and a register budget from the chunks held, so that 256-512 thread blocks (and
// clusters of them) share an SM.
// Template parameters: T (float or __nv_bfloat16), VEC (values per access: 1, or 16 bytes' worth), TPR
// (threads per row: 32 = a warp per row, else the whole block), THREADS (block size), ITEMS (values per
// thread, ITEMS % VEC == 0), CLUSTER (blocks per row). CLUSTER > 1 needs sm_90 (see norm_common.cuh).
#include "raw.cuh"

// [[snippet: layernorm_v5]]
template <typename T, int VEC, int TPR, int THREADS, int ITEMS, int CLUSTER>
__global__ void __launch_bounds__(THREADS, raw_blocks_per_sm<ITEMS / VEC, THREADS, true, CLUSTER>()) NORM_CLUSTER_DIMS(CLUSTER)
layernorm_v5_raw(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                 T* __restrict__ y, int rows, int n, float eps) {
    norm_rows_raw<TWOPASS_ILP, T, VEC, TPR, THREADS, ITEMS, CLUSTER>(x, w, b, y, rows, n, eps);
}
// [[/snippet]]

// [[snippet: rmsnorm_v4]]
template <typename T, int VEC, int TPR, int THREADS, int ITEMS, int CLUSTER>
__global__ void __launch_bounds__(THREADS, raw_blocks_per_sm<ITEMS / VEC, THREADS, false, CLUSTER>()) NORM_CLUSTER_DIMS(CLUSTER)
rmsnorm_v4_raw(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y, int rows, int n,
               float eps) {
    norm_rows_raw<RMS_ILP, T, VEC, TPR, THREADS, ITEMS, CLUSTER>(x, w, nullptr, y, rows, n, eps);
}
// [[/snippet]]
