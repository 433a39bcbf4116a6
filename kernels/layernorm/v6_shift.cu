// v6_shift.cu: layernorm_v6_shift: v5 with sums shifted by the row's first
// value (shifted_stats in raw.cuh): one reduction per row, as RMSNorm has.
// Template parameters: T (float or __nv_bfloat16), VEC (values per access: 1, or 16 bytes' worth), TPR
// (threads per row: 32 = a warp per row, else the whole block), THREADS (block size), ITEMS (values per
// thread, ITEMS % VEC == 0), CLUSTER (blocks per row). CLUSTER > 1 needs sm_90 (see norm_common.cuh).
#include "raw.cuh"

// [[snippet: layernorm_v6]]
// v5 with shifted sums: one reduction per row (one block barrier, one cluster barrier, as RMSNorm)
// instead of two sums and a Chan merge, and RMSNorm's register budget (no mean_b / n_block / Welford
// state live across the barriers, w and b one chunk at a time), so on the cluster layouts it keeps as
// many blocks per SM as rmsnorm_v4 (at 65536: 4 instead of 3 blocks of 256 for fp32). Without a
// cluster it keeps v5's budget: RMSNorm's spills a few bytes on the 2- and 4-chunk bf16 layouts.
template <typename T, int VEC, int TPR, int THREADS, int ITEMS, int CLUSTER>
__global__ void __launch_bounds__(THREADS, raw_blocks_per_sm<ITEMS / VEC, THREADS, CLUSTER == 1, CLUSTER>()) NORM_CLUSTER_DIMS(CLUSTER)
layernorm_v6_shift(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                   T* __restrict__ y, int rows, int n, float eps) {
    norm_rows_raw<SHIFTED, T, VEC, TPR, THREADS, ITEMS, CLUSTER>(x, w, b, y, rows, n, eps);
}
// [[/snippet]]
