// v4_ilp.cu: layernorm_v4_ilp and rmsnorm_v3_ilp: v3's 16-byte layout with v1's
// exact two-pass statistics, computed from the registers with four independent accumulators per thread
// (no serial Welford chain); a cluster merges its blocks' exact (n, mean, M2) with Chan's formula (one
// cluster barrier instead of two); a register budget sized to the values held (blocks_per_sm below).
// Template parameters: T (float or __nv_bfloat16), VEC (values per access: 1, or 16 bytes' worth), TPR
// (threads per row: 32 = a warp per row, else the whole block), THREADS (block size), ITEMS (values per
// thread, ITEMS % VEC == 0), CLUSTER (blocks per row). CLUSTER > 1 needs sm_90 (see norm_common.cuh).
#include "ilp.cuh"

// Register budget of v4 / rmsnorm_v3 (the min-blocks of __launch_bounds__): 2048 threads per SM
// (32 registers) for up to 8 values per thread, 1024 (64 registers) up to 32, 512 (128) beyond.
// More resident threads mean more 16-byte loads in flight per SM and more blocks to overlap one
// block's reduction with another's loads.
template <int THREADS, int ITEMS>
__host__ __device__ constexpr int blocks_per_sm() {
    constexpr int threads_per_sm = ITEMS <= 8 ? 2048 : ITEMS <= 32 ? 1024 : 512;
    return threads_per_sm >= THREADS ? threads_per_sm / THREADS : 1;
}

// [[snippet: layernorm_v4]]
template <typename T, int VEC, int TPR, int THREADS, int ITEMS, int CLUSTER>
__global__ void __launch_bounds__(THREADS, blocks_per_sm<THREADS, ITEMS>()) NORM_CLUSTER_DIMS(CLUSTER)
layernorm_v4_ilp(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                 T* __restrict__ y, int rows, int n, float eps) {
    static_assert(VEC * sizeof(T) == 16, "v4 moves 16 bytes per access");
    static_assert(THREADS * ITEMS <= 32768, "more values per block than 128 registers per thread hold");
    norm_rows_ilp<TWOPASS_ILP, T, VEC, TPR, THREADS, ITEMS, CLUSTER>(x, w, b, y, rows, n, eps);
}
// [[/snippet]]

// [[snippet: rmsnorm_v3]]
template <typename T, int VEC, int TPR, int THREADS, int ITEMS, int CLUSTER>
__global__ void __launch_bounds__(THREADS, blocks_per_sm<THREADS, ITEMS>()) NORM_CLUSTER_DIMS(CLUSTER)
rmsnorm_v3_ilp(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y, int rows, int n,
               float eps) {
    static_assert(VEC * sizeof(T) == 16, "v3 moves 16 bytes per access");
    static_assert(THREADS * ITEMS <= 32768, "more values per block than 128 registers per thread hold");
    norm_rows_ilp<RMS_ILP, T, VEC, TPR, THREADS, ITEMS, CLUSTER>(x, w, nullptr, y, rows, n, eps);
}
// [[/snippet]]
