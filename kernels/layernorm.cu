// layernorm.cu: LayerNorm and RMSNorm forward over the last dimension of a rows x N matrix,
// C-contiguous, fp32 or bf16 in and out, fp32 arithmetic inside.
//   LayerNorm: y = (x - mean) * rstd * w + b,  rstd = 1 / sqrt(var + eps),  var = mean of (x - mean)^2
//   RMSNorm:   y = x * rstd * w,               rstd = 1 / sqrt(mean of x^2 + eps)
// Every x is read once and every y written once (plus w, b once), so the bar is the device-to-device
// copy of the same bytes. Versions, each against the one before:
//
//   layernorm_v0_naive      one block of 256 threads per row; sum and sum of squares in one sweep,
//                           var = E[x^2] - E[x]^2 (cancels catastrophically for a large mean), then a
//                           second sweep re-reads x to normalize
//   layernorm_v1_twopass    the row held in registers (ITEMS values per thread; a warp per row for
//                           short rows, a block per row for long ones, a cluster of 8 blocks per row
//                           for the longest): mean first, then the sum of squared deviations from the
//                           registers; x is read from memory once; two reductions per row
//   layernorm_v2_welford    v1 with the statistics as Welford states: each thread updates (n, mean,
//                           M2) value by value, warps, blocks and clusters merge states (Chan): one
//                           reduction per row
//   layernorm_v3_vec16      v2 with 16-byte loads and stores (4 fp32 or 8 bf16 per access)
//
//   layernorm_v4_ilp        v3's 16-byte layout with v1's exact two-pass statistics, computed from
//                           the registers with four independent accumulators per thread (no serial
//                           Welford chain); a cluster merges its blocks' exact (n, mean, M2) with
//                           Chan's formula (one cluster barrier instead of two); register budget
//                           sized to the values held (2048 threads per SM for <= 8 values)
//
//   layernorm_v5_raw        v4 keeping each 16-byte chunk raw (4 registers whatever the dtype: 8 bf16
//                           values where v4 widens them to 8 fp32 registers), unpacked in every pass;
//                           w and b loaded a group of chunks at a time (the first group before the
//                           reduction), and a register budget from the chunks held, so that 256-512
//                           thread blocks (and clusters of them) share an SM
//
//   layernorm_v6_shift      v5 with sums shifted by the row's first value: one reduction per row
//   layernorm_v7_stream     a persistent, double-buffered stream of rows (softmax_v9's pipeline): as
//                           many clusters as fit at once, each CTA a fixed slice of every row copied
//                           into one of two smem buffers with cp.async while the other is reduced and
//                           written; exact per-CTA two-pass statistics from smem, Chan's merge
//
//   rmsnorm_v0_naive        one block of 256 threads per row, sum of squares, x re-read to normalize
//   rmsnorm_v1_registers    the row held in registers as in layernorm_v1: one read, one reduction
//   rmsnorm_v2_vec16        v1 with 16-byte loads and stores
//   rmsnorm_v3_ilp          v2 with four accumulators and layernorm_v4's register budget
//   rmsnorm_v4_raw          v3 with layernorm_v5's raw chunks, grouped weight loads and register budget
//   rmsnorm_v5_stream       layernorm_v7's stream with the sum of squares
//
//   layernorm_v8_early_arrive, rmsnorm_v6_early_arrive
//                           layernorm_v6 / rmsnorm_v4 with the exit cluster barrier split: a relaxed
//                           arrive right after the DSMEM reads, the stores, then the wait before exit
//
// Template parameters of v1-v3: T (float or __nv_bfloat16), VEC (values per access: 1, or 16 bytes'
// worth), TPR (threads per row: 32 = a warp per row, else the whole block), THREADS (block size),
// ITEMS (values per thread, ITEMS % VEC == 0), CLUSTER (blocks per row; 1 or 8). A rank of the
// cluster covers a contiguous slice of TPR * ITEMS values of the row.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include "common.cuh"
#include "welford.cuh"
#include "row_stream.cuh"

namespace cg = cooperative_groups;

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// VEC values of T as one aligned access: 16 bytes for (float, 4) and (bf16, 8), one value for VEC 1.
template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) Pack {
    T v[VEC];
};

// Sum over the threads of one row (a warp, a block, or a cluster of blocks). `red` is a private
// [33] float buffer in shared memory for this one reduction (a second reduction needs another).
// EARLY_ARRIVE: the row's last cluster reduction; each thread arrives (relaxed) at the exit barrier
// once its DSMEM reads (acquire loads) have returned, and waits before it exits (norm_rows_raw).
template <int TPR, int CLUSTER, bool EARLY_ARRIVE = false>
__device__ __forceinline__ float row_sum(float v, float* red) {
    v = warp_sum(v);
    const int lane = threadIdx.x & 31;
    if constexpr (TPR > 32) {
        if (lane == 0) red[threadIdx.x >> 5] = v;
        __syncthreads();
        v = warp_sum(lane < TPR / 32 ? red[lane] : 0.f);
    }
    if constexpr (CLUSTER > 1) {
        cg::cluster_group cluster = cg::this_cluster();
        if (threadIdx.x == 0) red[32] = v;
        cluster.sync();
        if constexpr (EARLY_ARRIVE) {   // the data is back before the arrive issues (row_stream.cuh)
            v = warp_sum(lane < CLUSTER ? ld_acquire_cluster(cluster.map_shared_rank(&red[32], lane)) : 0.f);
            cluster_arrive_relaxed();
        } else {
            v = warp_sum(lane < CLUSTER ? *cluster.map_shared_rank(&red[32], lane) : 0.f);
        }
    }
    return v;
}

// Two sums over the threads of one row in one reduction: one block barrier and one cluster barrier
// for both (row_sum twice would pay each barrier twice). `red` is [2][33] in shared memory.
template <int TPR, int CLUSTER, bool EARLY_ARRIVE = false>
__device__ __forceinline__ float2 row_sum2(float2 v, float (*red)[33]) {
    v.x = warp_sum(v.x);
    v.y = warp_sum(v.y);
    const int lane = threadIdx.x & 31;
    if constexpr (TPR > 32) {
        if (lane == 0) { red[0][threadIdx.x >> 5] = v.x; red[1][threadIdx.x >> 5] = v.y; }
        __syncthreads();
        v.x = warp_sum(lane < TPR / 32 ? red[0][lane] : 0.f);
        v.y = warp_sum(lane < TPR / 32 ? red[1][lane] : 0.f);
    }
    if constexpr (CLUSTER > 1) {
        cg::cluster_group cluster = cg::this_cluster();
        if (threadIdx.x == 0) { red[0][32] = v.x; red[1][32] = v.y; }
        cluster.sync();
        if constexpr (EARLY_ARRIVE) {   // the data is back before the arrive issues (row_stream.cuh)
            v.x = warp_sum(lane < CLUSTER ? ld_acquire_cluster(cluster.map_shared_rank(&red[0][32], lane)) : 0.f);
            v.y = warp_sum(lane < CLUSTER ? ld_acquire_cluster(cluster.map_shared_rank(&red[1][32], lane)) : 0.f);
            cluster_arrive_relaxed();
        } else {
            v.x = warp_sum(lane < CLUSTER ? *cluster.map_shared_rank(&red[0][32], lane) : 0.f);
            v.y = warp_sum(lane < CLUSTER ? *cluster.map_shared_rank(&red[1][32], lane) : 0.f);
        }
    }
    return v;
}

template <int TPR, int CLUSTER>
__device__ __forceinline__ Welford row_welford(Welford s, Welford* red /* [33] in smem */) {
    if constexpr (TPR > 32) s = block_welford<TPR / 32>(s, red);
    else s = warp_welford(s);
    if constexpr (CLUSTER > 1) s = cluster_welford<CLUSTER>(s, &red[32]);
    return s;
}

// [[snippet: layernorm_v0]]
// One block of 256 threads per row. Sweep 1 accumulates sum x and sum x^2 (strided, coalesced);
// var = E[x^2] - E[x]^2 in fp32. Sweep 2 reads x again (from L2 if the row is still there).
template <typename T>
__device__ __forceinline__ void naive_row(const T* __restrict__ x, const T* __restrict__ w,
                                          const T* __restrict__ b, T* __restrict__ y, int n, float eps,
                                          bool rms) {
    __shared__ float red[2][33];
    const size_t base = (size_t)blockIdx.x * n;
    float s = 0.f, ss = 0.f;
    for (int c = threadIdx.x; c < n; c += blockDim.x) {
        const float v = to_f32(x[base + c]);
        s += v;
        ss += v * v;
    }
    s = row_sum<256, 1>(s, red[0]);
    ss = row_sum<256, 1>(ss, red[1]);
    const float mean = rms ? 0.f : s / n;
    const float var = rms ? ss / n : fmaxf(ss / n - mean * mean, 0.f);   // the cancellation
    const float rstd = rsqrtf(var + eps);
    for (int c = threadIdx.x; c < n; c += blockDim.x) {
        const float v = (to_f32(x[base + c]) - mean) * rstd * to_f32(w[c]);
        y[base + c] = from_f32<T>(rms ? v : v + to_f32(b[c]));
    }
}

template <typename T>
__global__ void __launch_bounds__(256) layernorm_v0_naive(const T* __restrict__ x, const T* __restrict__ w,
                                                          const T* __restrict__ b, T* __restrict__ y,
                                                          int rows, int n, float eps) {
    naive_row<T>(x, w, b, y, n, eps, false);
}
// [[/snippet]]

// [[snippet: rmsnorm_v0]]
template <typename T>
__global__ void __launch_bounds__(256) rmsnorm_v0_naive(const T* __restrict__ x, const T* __restrict__ w,
                                                        T* __restrict__ y, int rows, int n, float eps) {
    naive_row<T>(x, w, nullptr, y, n, eps, true);
}
// [[/snippet]]

// [[snippet: norm_rows]]
enum Stats { TWOPASS = 0, WELFORD = 1, RMS = 2, TWOPASS_ILP = 3, RMS_ILP = 4, SHIFTED = 5 };

// Exact two-pass statistics of the values this block holds, with four independent accumulators
// (slot k & 3 is fixed at compile time, so four add/FMA chains run side by side instead of one),
// then, for a cluster, Chan's merge of the blocks' exact (n, mean, M2): merging partitions is where
// Welford's algebra belongs; inside a block the row is in registers, so a second sweep is free of
// bytes. `col0` is this thread's first column, `n_block` the number of valid columns of this block.
// Sum of NACC partial sums, in a fixed order.
template <int NACC>
__device__ __forceinline__ float acc_total(const float (&acc)[NACC]) {
    float t = 0.f;
#pragma unroll
    for (int a = 0; a < NACC; ++a) t += acc[a];
    return t;
}

// The row's mean and M2 / n from this block's exact (n_block, mean_b, M2_b): as they are for a block
// that holds the whole row, merged over the cluster's blocks with Chan's formula otherwise.
template <int CLUSTER>
__device__ __forceinline__ void row_stats(int n_block, float mean_b, float m2_b, Welford* red_w /* [33] */,
                                          float& mean, float& m2_over_n) {
    if constexpr (CLUSTER > 1) {
        const Welford st = cluster_welford<CLUSTER>(Welford{(float)n_block, mean_b, m2_b}, &red_w[32]);
        mean = st.mean;
        m2_over_n = st.m2 / st.n;
    } else {
        mean = mean_b;
        m2_over_n = m2_b / n_block;
    }
}

template <int TPR, int CLUSTER, int VEC, int NV, int NACC>
__device__ __forceinline__ void twopass_ilp(const float (&v)[NV * VEC], int col0, int n, int n_block,
                                            float (*red_f)[33], Welford* red_w, float& mean,
                                            float& m2_over_n) {
    float acc[NACC] = {};
#pragma unroll
    for (int i = 0; i < NV * VEC; ++i) acc[i % NACC] += v[i];          // invalid slots hold 0
    const float s = row_sum<TPR, 1>(acc_total<NACC>(acc), red_f[0]);
    const float mean_b = n_block > 0 ? s / n_block : 0.f;           // an empty rank: n = 0, M2 = 0
    #pragma unroll
    for (int a = 0; a < NACC; ++a) acc[a] = 0.f;
#pragma unroll
    for (int j = 0; j < NV; ++j) {
        if (col0 + j * TPR * VEC < n) {
#pragma unroll
            for (int k = 0; k < VEC; ++k) {
                const float d = v[j * VEC + k] - mean_b;
                acc[k % NACC] = fmaf(d, d, acc[k % NACC]);
            }
        }
    }
    const float m2_b = row_sum<TPR, 1>(acc_total<NACC>(acc), red_f[1]);
    row_stats<CLUSTER>(n_block, mean_b, m2_b, red_w, mean, m2_over_n);
}

// Sum of squares with four independent accumulators (RMSNorm), reduced over the row.
template <int TPR, int CLUSTER, int ITEMS>
__device__ __forceinline__ float sumsq_ilp(const float (&v)[ITEMS], float* red) {
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) acc[i & 3] = fmaf(v[i], v[i], acc[i & 3]);
    return row_sum<TPR, CLUSTER>((acc[0] + acc[1]) + (acc[2] + acc[3]), red);
}

// Where this thread's part of a row lies: rank r of the cluster, thread t of the row, access j at
//   col(j) = r * TPR * ITEMS + (j * TPR + t) * VEC + [0, VEC)
struct RowSlice {
    int rank, row, col0;                 // col(j) = col0 + j * TPR * VEC
    size_t base;                         // the row's first element
};

template <int VEC, int TPR, int THREADS, int ITEMS, int CLUSTER>
__device__ __forceinline__ RowSlice row_slice(int n) {
    static_assert(ITEMS % VEC == 0, "ITEMS must be a multiple of VEC");
    static_assert(TPR == 32 || TPR == THREADS, "a warp per row, or the whole block per row");
    static_assert(CLUSTER == 1 || TPR == THREADS, "a cluster splits one row over its blocks");
    RowSlice rs;
    rs.rank = CLUSTER > 1 ? (int)cg::this_cluster().block_rank() : 0;
    rs.row = (blockIdx.x / CLUSTER) * (THREADS / TPR) + threadIdx.x / TPR;
    rs.base = (size_t)rs.row * n;
    rs.col0 = rs.rank * TPR * ITEMS + (int)(threadIdx.x % TPR) * VEC;
    return rs;
}

// One row per TPR threads; the row's values live in v[ITEMS] (fp32) between the read and the write.
// With RowSlice's index map a warp's accesses are contiguous (coalesced) and a thread's valid
// columns are a prefix of j.
template <int STATS, typename T, int VEC, int TPR, int THREADS, int ITEMS, int CLUSTER>
__device__ __forceinline__ void norm_rows(const T* __restrict__ x, const T* __restrict__ w,
                                          const T* __restrict__ b, T* __restrict__ y, int rows, int n,
                                          float eps) {
    constexpr int NV = ITEMS / VEC;
    __shared__ float red_f[2][33];       // two sums (mean, then deviations) for TWOPASS / one for RMS
    __shared__ Welford red_w[33];        // warp states [32] + the block's state for the cluster [1]
    const RowSlice rs = row_slice<VEC, TPR, THREADS, ITEMS, CLUSTER>(n);
    if (rs.row >= rows) return;          // whole warps only: blocks and clusters never take this path
    const int rank = rs.rank, col0 = rs.col0;
    const size_t base = rs.base;

    float v[ITEMS];                      // [NV, VEC] values of this thread, fp32
#pragma unroll
    for (int j = 0; j < NV; ++j) {
        const int col = col0 + j * TPR * VEC;
        Pack<T, VEC> p;
        if (col < n) p = *reinterpret_cast<const Pack<T, VEC>*>(x + base + col);
#pragma unroll
        for (int k = 0; k < VEC; ++k) v[j * VEC + k] = col < n ? to_f32(p.v[k]) : 0.f;
    }

    float mean = 0.f, rstd;
    if constexpr (STATS == TWOPASS) {
        float s = 0.f;
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) s += v[i];              // invalid slots hold 0
        mean = row_sum<TPR, CLUSTER>(s, red_f[0]) / n;
        float d2 = 0.f;
#pragma unroll
        for (int j = 0; j < NV; ++j) {
            if (col0 + j * TPR * VEC < n) {
#pragma unroll
                for (int k = 0; k < VEC; ++k) {
                    const float d = v[j * VEC + k] - mean;
                    d2 = fmaf(d, d, d2);
                }
            }
        }
        rstd = rsqrtf(row_sum<TPR, CLUSTER>(d2, red_f[1]) / n + eps);
    } else if constexpr (STATS == WELFORD) {
        Welford s{0.f, 0.f, 0.f};
#pragma unroll
        for (int j = 0; j < NV; ++j) {
            if (col0 + j * TPR * VEC < n) {      // valid accesses are a prefix of j, so the count
#pragma unroll                               // after value i is i + 1 and 1 / n is a constant
                for (int k = 0; k < VEC; ++k) welford_push(s, v[j * VEC + k], 1.f / (j * VEC + k + 1));
            }
        }
        s = row_welford<TPR, CLUSTER>(s, red_w);
        mean = s.mean;
        rstd = rsqrtf(s.m2 / s.n + eps);
    } else if constexpr (STATS == TWOPASS_ILP) {
        const int n_block = min(max(n - rank * TPR * ITEMS, 0), TPR * ITEMS);
        float var;
        constexpr int NACC = ITEMS >= 32 ? 2 : 4;   // 4 chains spill the 64-register budget at 32 values
        twopass_ilp<TPR, CLUSTER, VEC, NV, NACC>(v, col0, n, n_block, red_f, red_w, mean, var);
        rstd = rsqrtf(var + eps);
    } else if constexpr (STATS == RMS_ILP) {
        rstd = rsqrtf(sumsq_ilp<TPR, CLUSTER, ITEMS>(v, red_f[0]) / n + eps);
    } else {
        float ss = 0.f;
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) ss = fmaf(v[i], v[i], ss);
        rstd = rsqrtf(row_sum<TPR, CLUSTER>(ss, red_f[0]) / n + eps);
    }

#pragma unroll
    for (int j = 0; j < NV; ++j) {
        const int col = col0 + j * TPR * VEC;
        if (col < n) {
            const Pack<T, VEC> pw = *reinterpret_cast<const Pack<T, VEC>*>(w + col);
            Pack<T, VEC> pb, out;
            if constexpr (STATS != RMS && STATS != RMS_ILP) pb = *reinterpret_cast<const Pack<T, VEC>*>(b + col);
#pragma unroll
            for (int k = 0; k < VEC; ++k) {
                float o = (v[j * VEC + k] - mean) * rstd * to_f32(pw.v[k]);
                if constexpr (STATS != RMS && STATS != RMS_ILP) o += to_f32(pb.v[k]);
                out.v[k] = from_f32<T>(o);
            }
            *reinterpret_cast<Pack<T, VEC>*>(y + base + col) = out;
        }
    }
    if constexpr (CLUSTER > 1) cg::this_cluster().sync();   // keep our smem alive for the others' reads
}
// [[/snippet]]

// The versions: the same row machinery with different statistics and access widths. The cluster
// shape is declared on the kernel (CLUSTER = 1: a cluster of one block, an ordinary launch).
// Registers: the scalar versions (one load per value) may use up to 128 registers per thread (one
// block of 512 per SM); the 16-byte versions aim at 1024 threads per SM (64 registers each) for
// ITEMS <= 32, and take 128 registers for the 64-value layout.

// [[snippet: layernorm_v1]]
template <typename T, int VEC, int TPR, int THREADS, int ITEMS, int CLUSTER>
__global__ void __launch_bounds__(THREADS, 1) __cluster_dims__(CLUSTER, 1, 1)
layernorm_v1_twopass(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                     T* __restrict__ y, int rows, int n, float eps) {
    norm_rows<TWOPASS, T, VEC, TPR, THREADS, ITEMS, CLUSTER>(x, w, b, y, rows, n, eps);
}
// [[/snippet]]

// [[snippet: layernorm_v2]]
template <typename T, int VEC, int TPR, int THREADS, int ITEMS, int CLUSTER>
__global__ void __launch_bounds__(THREADS, 1) __cluster_dims__(CLUSTER, 1, 1)
layernorm_v2_welford(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                     T* __restrict__ y, int rows, int n, float eps) {
    norm_rows<WELFORD, T, VEC, TPR, THREADS, ITEMS, CLUSTER>(x, w, b, y, rows, n, eps);
}
// [[/snippet]]

// [[snippet: layernorm_v3]]
// Launched with VEC = 16 / sizeof(T): one 16-byte load or store moves 4 fp32 or 8 bf16 values.
template <typename T, int VEC, int TPR, int THREADS, int ITEMS, int CLUSTER>
__global__ void __launch_bounds__(THREADS, ITEMS >= 64 ? 1 : 1024 / THREADS) __cluster_dims__(CLUSTER, 1, 1)
layernorm_v3_vec16(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                   T* __restrict__ y, int rows, int n, float eps) {
    static_assert(VEC * sizeof(T) == 16, "v3 moves 16 bytes per access");
    norm_rows<WELFORD, T, VEC, TPR, THREADS, ITEMS, CLUSTER>(x, w, b, y, rows, n, eps);
}
// [[/snippet]]

// [[snippet: rmsnorm_v1]]
template <typename T, int VEC, int TPR, int THREADS, int ITEMS, int CLUSTER>
__global__ void __launch_bounds__(THREADS, 1) __cluster_dims__(CLUSTER, 1, 1)
rmsnorm_v1_registers(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y, int rows, int n,
                     float eps) {
    norm_rows<RMS, T, VEC, TPR, THREADS, ITEMS, CLUSTER>(x, w, nullptr, y, rows, n, eps);
}
// [[/snippet]]

// [[snippet: rmsnorm_v2]]
template <typename T, int VEC, int TPR, int THREADS, int ITEMS, int CLUSTER>
__global__ void __launch_bounds__(THREADS, ITEMS >= 64 ? 1 : 1024 / THREADS) __cluster_dims__(CLUSTER, 1, 1)
rmsnorm_v2_vec16(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y, int rows, int n,
                 float eps) {
    static_assert(VEC * sizeof(T) == 16, "v2 moves 16 bytes per access");
    norm_rows<RMS, T, VEC, TPR, THREADS, ITEMS, CLUSTER>(x, w, nullptr, y, rows, n, eps);
}
// [[/snippet]]

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
__global__ void __launch_bounds__(THREADS, blocks_per_sm<THREADS, ITEMS>()) __cluster_dims__(CLUSTER, 1, 1)
layernorm_v4_ilp(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                 T* __restrict__ y, int rows, int n, float eps) {
    static_assert(VEC * sizeof(T) == 16, "v4 moves 16 bytes per access");
    static_assert(THREADS * ITEMS <= 32768, "more values per block than 128 registers per thread hold");
    norm_rows<TWOPASS_ILP, T, VEC, TPR, THREADS, ITEMS, CLUSTER>(x, w, b, y, rows, n, eps);
}
// [[/snippet]]

// [[snippet: rmsnorm_v3]]
template <typename T, int VEC, int TPR, int THREADS, int ITEMS, int CLUSTER>
__global__ void __launch_bounds__(THREADS, blocks_per_sm<THREADS, ITEMS>()) __cluster_dims__(CLUSTER, 1, 1)
rmsnorm_v3_ilp(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y, int rows, int n,
               float eps) {
    static_assert(VEC * sizeof(T) == 16, "v3 moves 16 bytes per access");
    static_assert(THREADS * ITEMS <= 32768, "more values per block than 128 registers per thread hold");
    norm_rows<RMS_ILP, T, VEC, TPR, THREADS, ITEMS, CLUSTER>(x, w, nullptr, y, rows, n, eps);
}
// [[/snippet]]

// [[snippet: norm_raw]]
// The raw-chunk rows of layernorm_v5 / rmsnorm_v4. Same index map as norm_rows (ITEMS values = NC
// chunks of VEC per thread), but a thread keeps its chunks as the 16 bytes that came from memory:
// uint4 q[NC], 4 registers per chunk for fp32 and for bf16 alike, so a bf16 thread holds a row slice
// in half the registers v4 needs. Each pass unpacks what it reads; chunks past the row's end hold
// zero bits (0.0 in both dtypes), which the sum ignores and the other passes skip.
//
// Run 1 put v4 at 40-73% of copy on the long rows where softmax, with the same layouts and no
// weights, reached 69-96%: the difference is the write pass, which loads w (and b) one chunk at a
// time behind a branch, an L2 round trip per chunk with no x loads in flight. Here the weights come
// in groups of WG chunks, unconditionally (a clamped address past the end), and the first group is
// issued before the reduction so its latency hides behind the barriers.

// unpack_raw (bf16 pairs -> floats by byte permutes, `asm volatile` so that the compiler does not
// compute the widened values once and hold them from one pass to the next, which would cost 8
// registers per bf16 chunk again) and pack_raw live in row_stream.cuh, shared with chapter 6.

// This thread's sum of the values (SQUARE: of their squares) in its raw chunks, two accumulators;
// chunks past the row's end hold zero bits and add nothing.
template <bool SQUARE, int VEC, int NC>
__device__ __forceinline__ float raw_sum(const uint4 (&q)[NC]) {
    float acc[2] = {0.f, 0.f};
#pragma unroll
    for (int j = 0; j < NC; ++j) {
        float v[VEC];
        unpack_raw(q[j], v);
#pragma unroll
        for (int k = 0; k < VEC; ++k) acc[k & 1] = SQUARE ? fmaf(v[k], v[k], acc[k & 1]) : acc[k & 1] + v[k];
    }
    return acc[0] + acc[1];
}

// Weight chunks per group in the write pass (the registers: 4 per chunk for w, 4 more for b).
template <int NC>
__host__ __device__ constexpr int raw_weight_group() { return NC < 2 ? NC : 2; }

// Blocks per SM that __launch_bounds__ asks ptxas to make room for: the register file (64 Ki) over
// an estimate of the registers a thread needs (4 per chunk of x, 8 or 16 for a group of weight
// chunks, ~16 for addresses and statistics, 8 more for a cluster's merge), at most 2048 threads per
// SM. ptxas fills whatever cap it is given (it hoists loads and unpacks), so the estimate must be
// tight to buy occupancy (with 24 instead of 16, the 8-chunk fp32 block of 512 got one block per SM).
template <int NC, int THREADS, bool HAS_B, int CLUSTER>
__host__ __device__ constexpr int raw_blocks_per_sm() {
    constexpr int regs = 4 * NC + 4 * raw_weight_group<NC>() * (HAS_B ? 2 : 1) + (CLUSTER > 1 ? 24 : 16);
    constexpr int by_regs = 65536 / (THREADS * regs);
    constexpr int by_threads = 2048 / THREADS;
    return by_regs < 1 ? 1 : (by_regs < by_threads ? by_regs : by_threads);
}

// Shifted sums (layernorm_v6): with K the row's first value, every thread of every rank accumulates
// S = sum (x - K) and Q = sum (x - K)^2, one reduction gives both, and
//   mean = K + S / n,   var = Q / n - (S / n)^2.
// The cancellation of E[x^2] - E[x]^2 is now between Q / n = var + (mean - K)^2 and (mean - K)^2: it
// costs bits in proportion to (mean - K)^2 / var, which is about 1 for K drawn from the row (and at
// most n when x_0 is the row's worst outlier), instead of mean^2 / var (1e8 for mean 1e4, std 1).
// x - K is exact (Sterbenz) whenever x and K are within a factor 2 of each other.
template <int TPR, int CLUSTER, int VEC, int NC, bool EARLY_ARRIVE = false>
__device__ __forceinline__ void shifted_stats(const uint4 (&q)[NC], float shift, int col0, int n,
                                              float (*red_f)[33], float& mean, float& var) {
    float acc_s[2] = {0.f, 0.f}, acc_q[2] = {0.f, 0.f};
#pragma unroll
    for (int j = 0; j < NC; ++j) {
        if (col0 + j * TPR * VEC < n) {
            float v[VEC];
            unpack_raw(q[j], v);
#pragma unroll
            for (int k = 0; k < VEC; ++k) {
                const float d = v[k] - shift;
                acc_s[k & 1] += d;
                acc_q[k & 1] = fmaf(d, d, acc_q[k & 1]);
            }
        }
    }
    const float2 t = row_sum2<TPR, CLUSTER, EARLY_ARRIVE>(make_float2(acc_s[0] + acc_s[1], acc_q[0] + acc_q[1]), red_f);
    const float dm = t.x / n;                         // mean - K
    mean = shift + dm;
    var = fmaxf(t.y / n - dm * dm, 0.f);
}

// One output chunk from raw chunks of x, w (and b): (x - mean) * rstd * w (+ b), packed back to T.
template <bool LN, int VEC>
__device__ __forceinline__ uint4 norm_chunk(const uint4& qx, const uint4& qw, const uint4& qb, float mean,
                                            float rstd) {
    float v[VEC], fw[VEC], fb[VEC], o[VEC];
    unpack_raw(qx, v);
    unpack_raw(qw, fw);
    if constexpr (LN) unpack_raw(qb, fb);
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
        o[k] = (v[k] - mean) * rstd * fw[k];
        if constexpr (LN) o[k] += fb[k];
    }
    return pack_raw(o);
}

// EARLY_ARRIVE (layernorm_v8 / rmsnorm_v6): the exit cluster barrier split, see layernorm_v8.
template <int STATS, typename T, int VEC, int TPR, int THREADS, int ITEMS, int CLUSTER, bool EARLY_ARRIVE = false>
__device__ __forceinline__ void norm_rows_raw(const T* __restrict__ x, const T* __restrict__ w,
                                              const T* __restrict__ b, T* __restrict__ y, int rows, int n,
                                              float eps) {
    static_assert(VEC * sizeof(T) == 16, "raw chunks are 16 bytes");
    static_assert(STATS == TWOPASS_ILP || STATS == SHIFTED || STATS == RMS_ILP, "raw statistics");
    static_assert(!EARLY_ARRIVE || STATS != TWOPASS_ILP, "early arrive: one cluster reduction per row (row_sum/2)");
    constexpr bool LN = STATS != RMS_ILP;
    constexpr int NC = ITEMS / VEC;
    // v6 loads w and b one chunk at a time: 8 registers, as RMSNorm's two chunks of w, so that it fits
    // RMSNorm's budget (with two chunks of each ptxas spills at that budget)
    constexpr int WG = STATS == SHIFTED ? (NC < 1 ? NC : 1) : raw_weight_group<NC>();
    constexpr int NG = (NC + WG - 1) / WG;
    __shared__ float red_f[2][33];
    __shared__ Welford red_w[33];
    const RowSlice rs = row_slice<VEC, TPR, THREADS, ITEMS, CLUSTER>(n);
    if (rs.row >= rows) return;          // whole warps only: blocks and clusters never take this path
    const int rank = rs.rank;
    const size_t base = rs.base;
    auto col_of = [&](int j) { return rs.col0 + j * TPR * VEC; };

    uint4 q[NC];                         // [NC] raw 16-byte chunks of x
#pragma unroll
    for (int j = 0; j < NC; ++j)
        q[j] = col_of(j) < n ? __ldg(reinterpret_cast<const uint4*>(x + base + col_of(j))) : make_uint4(0, 0, 0, 0);

    // Weight group g: chunks [g * WG, g * WG + WG); a chunk past the end reads column 0 (never used).
    uint4 qw[WG], qb[WG];
    auto load_weights = [&](int g) {
#pragma unroll
        for (int i = 0; i < WG; ++i) {
            const int c = col_of(g * WG + i) < n ? col_of(g * WG + i) : 0;
            qw[i] = __ldg(reinterpret_cast<const uint4*>(w + c));
            if constexpr (LN) qb[i] = __ldg(reinterpret_cast<const uint4*>(b + c));
        }
    };
    load_weights(0);                     // in flight through the reduction

    float mean = 0.f, rstd;
    if constexpr (STATS == SHIFTED) {
        float var;
        shifted_stats<TPR, CLUSTER, VEC, NC, EARLY_ARRIVE>(q, to_f32(x[base]), rs.col0, n, red_f, mean, var);
        rstd = rsqrtf(var + eps);
    } else if constexpr (LN) {
        const int n_block = min(max(n - rank * TPR * ITEMS, 0), TPR * ITEMS);
        const float s = row_sum<TPR, 1>(raw_sum<false, VEC, NC>(q), red_f[0]);
        const float mean_b = n_block > 0 ? s / n_block : 0.f;
        float acc[2] = {0.f, 0.f};
#pragma unroll
        for (int j = 0; j < NC; ++j) {
            if (col_of(j) < n) {
                float v[VEC];
                unpack_raw(q[j], v);
#pragma unroll
                for (int k = 0; k < VEC; ++k) {
                    const float d = v[k] - mean_b;
                    acc[k & 1] = fmaf(d, d, acc[k & 1]);
                }
            }
        }
        float var;
        row_stats<CLUSTER>(n_block, mean_b, row_sum<TPR, 1>(acc[0] + acc[1], red_f[1]), red_w, mean, var);
        rstd = rsqrtf(var + eps);
    } else {
        rstd = rsqrtf(row_sum<TPR, CLUSTER, EARLY_ARRIVE>(raw_sum<true, VEC, NC>(q), red_f[0]) / n + eps);
    }

#pragma unroll
    for (int g = 0; g < NG; ++g) {
        if (g > 0) load_weights(g);
#pragma unroll
        for (int i = 0; i < WG; ++i) {
            const int j = g * WG + i;
            if (j < NC && col_of(j) < n) {
                *reinterpret_cast<uint4*>(y + base + col_of(j)) = norm_chunk<LN, VEC>(q[j], qw[i], qb[i], mean, rstd);
            }
        }
    }
    if constexpr (CLUSTER > 1) {
        if constexpr (EARLY_ARRIVE) cluster_wait();   // arrived in row_sum / row_sum2 already
        else cg::this_cluster().sync();               // keep our smem alive for the others' reads
    }
}
// [[/snippet]]

// [[snippet: layernorm_v5]]
template <typename T, int VEC, int TPR, int THREADS, int ITEMS, int CLUSTER>
__global__ void __launch_bounds__(THREADS, raw_blocks_per_sm<ITEMS / VEC, THREADS, true, CLUSTER>()) __cluster_dims__(CLUSTER, 1, 1)
layernorm_v5_raw(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                 T* __restrict__ y, int rows, int n, float eps) {
    norm_rows_raw<TWOPASS_ILP, T, VEC, TPR, THREADS, ITEMS, CLUSTER>(x, w, b, y, rows, n, eps);
}
// [[/snippet]]

// [[snippet: rmsnorm_v4]]
template <typename T, int VEC, int TPR, int THREADS, int ITEMS, int CLUSTER>
__global__ void __launch_bounds__(THREADS, raw_blocks_per_sm<ITEMS / VEC, THREADS, false, CLUSTER>()) __cluster_dims__(CLUSTER, 1, 1)
rmsnorm_v4_raw(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y, int rows, int n,
               float eps) {
    norm_rows_raw<RMS_ILP, T, VEC, TPR, THREADS, ITEMS, CLUSTER>(x, w, nullptr, y, rows, n, eps);
}
// [[/snippet]]

// [[snippet: layernorm_v6]]
// v5 with shifted sums: one reduction per row (one block barrier, one cluster barrier, as RMSNorm)
// instead of two sums and a Chan merge, and RMSNorm's register budget (no mean_b / n_block / Welford
// state live across the barriers, w and b one chunk at a time), so on the cluster layouts it keeps as
// many blocks per SM as rmsnorm_v4 (at 65536: 4 instead of 3 blocks of 256 for fp32). Without a
// cluster it keeps v5's budget: RMSNorm's spills a few bytes on the 2- and 4-chunk bf16 layouts.
template <typename T, int VEC, int TPR, int THREADS, int ITEMS, int CLUSTER>
__global__ void __launch_bounds__(THREADS, raw_blocks_per_sm<ITEMS / VEC, THREADS, CLUSTER == 1, CLUSTER>()) __cluster_dims__(CLUSTER, 1, 1)
layernorm_v6_shift(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                   T* __restrict__ y, int rows, int n, float eps) {
    norm_rows_raw<SHIFTED, T, VEC, TPR, THREADS, ITEMS, CLUSTER>(x, w, b, y, rows, n, eps);
}
// [[/snippet]]

// [[snippet: layernorm_v8]]
// layernorm_v8_early_arrive / rmsnorm_v6_early_arrive: layernorm_v6 / rmsnorm_v4 with the exit cluster
// barrier split. Nsight Compute on the H200 (2026-11-29) put 15.5% of rmsnorm_v4's stall cycles per
// issued instruction on membar at fp32 128 x 262144 (23.5% at bf16 1024 x 65536), 13-16% for
// layernorm_v6, all at the ERRBAR of norm_rows_raw's last cluster.sync(): it comes after the stores, and
// a cluster barrier's arrive has release semantics, so every thread waits there until its stores are
// acknowledged and the CTA keeps its SM slot from the next cluster until then. That barrier only keeps
// red[32] alive for the peers' DSMEM reads of the row's one cluster reduction, so here every thread
// arrives (relaxed: no fence) right after its own DSMEM reads, in row_sum / row_sum2, and waits for the
// others' arrivals just before it exits (cluster_arrive_relaxed / cluster_wait, row_stream.cuh). The
// reads are acquire loads, so that the arrive cannot issue before their data is back.
// Same arithmetic and register budget as v6 / v4; instantiated on the cluster layouts only (EARLY_LAYOUTS).
template <typename T, int VEC, int TPR, int THREADS, int ITEMS, int CLUSTER>
__global__ void __launch_bounds__(THREADS, raw_blocks_per_sm<ITEMS / VEC, THREADS, CLUSTER == 1, CLUSTER>()) __cluster_dims__(CLUSTER, 1, 1)
layernorm_v8_early_arrive(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                          T* __restrict__ y, int rows, int n, float eps) {
    norm_rows_raw<SHIFTED, T, VEC, TPR, THREADS, ITEMS, CLUSTER, true>(x, w, b, y, rows, n, eps);
}
// [[/snippet]]

// [[snippet: rmsnorm_v6]]
template <typename T, int VEC, int TPR, int THREADS, int ITEMS, int CLUSTER>
__global__ void __launch_bounds__(THREADS, raw_blocks_per_sm<ITEMS / VEC, THREADS, false, CLUSTER>()) __cluster_dims__(CLUSTER, 1, 1)
rmsnorm_v6_early_arrive(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y, int rows, int n,
                        float eps) {
    norm_rows_raw<RMS_ILP, T, VEC, TPR, THREADS, ITEMS, CLUSTER, true>(x, w, nullptr, y, rows, n, eps);
}
// [[/snippet]]

// [[snippet: norm_stream]]
// layernorm_v7_stream / rmsnorm_v5_stream: chapter 6's softmax_v9 pipeline with the norms' statistics.
// A persistent grid of clusters of CL CTAs; cluster c walks rows c, c + G, ... (G clusters); each CTA
// owns the same slice of NC x THREADS 16-byte chunks of every row and double-buffers it in shared
// memory: the cp.async copies of the next row's slice land in one buffer while the current row is
// reduced and written from the other (row_stream.cuh), so HBM reads never pause for a barrier or a
// write phase, as they do wave after wave in v5 / v6 (one cluster per row, row in registers).
// Since the slice's columns are the same for every row, w (and b) of the slice are loaded once into
// registers before the loop: weight traffic is one read per CTA, not one per row.
// Statistics, with the row in shared memory (a re-read costs ~1 cycle per 128 bytes, not DRAM):
//   RMSNorm:   the sum of squares; block sum, then the CL partial sums over DSMEM.
//   LayerNorm: exact per CTA in two passes over the slice (the slice's mean, then the sum of squared
//              deviations from it), then Chan's merge of the CL states (n, mean, M2) over DSMEM. No
//              E[x^2] - E[x]^2 anywhere: a mean of 1e4 costs no bits beyond fp32's own.
// One cluster barrier per row: each CTA publishes its partial in a parity slot (row r in slot r's
// parity); a slot is rewritten two rows later, after every CTA has passed the next row's barrier.
template <bool LN, typename T, int NC, int THREADS, int CL>
__device__ __forceinline__ void norm_stream(const T* __restrict__ x, const T* __restrict__ w,
                                            const T* __restrict__ b, T* __restrict__ y, int rows, int n,
                                            float eps) {
    using Slice = RowSlice16<T, NC, THREADS>;
    constexpr int VEC = Slice::VEC;
    constexpr int WARPS = THREADS / 32;
    extern __shared__ uint4 slice_buf[];        // [2, NC * THREADS] chunks: the double buffer
    __shared__ float red_s[WARPS], red_q[WARPS];  // block sums (separate buffers: no barrier between)
    __shared__ Welford slot_w[2];               // LayerNorm: the CTA's (n, mean, M2), by row parity
    __shared__ float slot_f[2];                 // RMSNorm: the CTA's sum of squares, by row parity
    cg::cluster_group cluster = cg::this_cluster();
    const int rank = CL > 1 ? (int)cluster.block_rank() : 0;
    const int n_clusters = gridDim.x / CL;
    const int first = rank * Slice::CHUNKS;
    const bool vec_ok = n % VEC == 0;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    // values of the row in this CTA's slice (0 for the later ranks of a short row)
    const int n_cta = min(max(n - first * VEC, 0), Slice::CHUNKS * VEC);

    auto block_sum = [&](float v, float* red) {   // every thread gets the block's sum; one barrier
        v = warp_sum(v);
        if (WARPS == 1) return v;
        if (lane == 0) red[warp] = v;
        __syncthreads();
        return warp_sum(lane < WARPS ? red[lane] : 0.f);
    };

    int r = blockIdx.x / CL;
    Slice::issue(slice_buf, x + (size_t)r * n, first, n, vec_ok, 0u, r >= rows);   // pad: 0.0

    uint4 qw[NC], qb[NC];                       // [NC] raw chunks of w and b for this slice, all rows
#pragma unroll
    for (int j = 0; j < NC; ++j) {
        const int e0 = Slice::col(first, j);
        qw[j] = vec_ok && e0 < n ? __ldg(reinterpret_cast<const uint4*>(w + e0)) : gather_chunk(w, e0, n, 0u);
        if constexpr (LN) qb[j] = vec_ok && e0 < n ? __ldg(reinterpret_cast<const uint4*>(b + e0)) : gather_chunk(b, e0, n, 0u);
    }

    int p = 0;
    for (; r < rows; r += n_clusters, p ^= 1) {
        const uint4* buf = slice_buf + p * Slice::CHUNKS;
        const int r_next = r + n_clusters;
        Slice::issue(slice_buf + (p ^ 1) * Slice::CHUNKS, x + (size_t)r_next * n, first, n, vec_ok, 0u,
                     r_next >= rows);
        cp_async_wait<1>();                     // this thread's copies of row r have landed

        float mean = 0.f, rstd;
        if constexpr (LN) {
            float acc[2] = {0.f, 0.f};          // pass 1: the slice's sum (pad values are 0.0)
#pragma unroll
            for (int j = 0; j < NC; ++j) {
                float v[VEC];
                unpack_raw(Slice::get(buf, j), v);
#pragma unroll
                for (int k = 0; k < VEC; ++k) acc[k & 1] += v[k];
            }
            const float mean_b = n_cta > 0 ? block_sum(acc[0] + acc[1], red_s) / n_cta : 0.f;
            acc[0] = acc[1] = 0.f;              // pass 2: squared deviations from the slice's mean
#pragma unroll
            for (int j = 0; j < NC; ++j) {
                float v[VEC];
                unpack_raw(Slice::get(buf, j), v);
                const int e0 = Slice::col(first, j);
#pragma unroll
                for (int k = 0; k < VEC; ++k) {
                    const float d = e0 + k < n ? v[k] - mean_b : 0.f;
                    acc[k & 1] = fmaf(d, d, acc[k & 1]);
                }
            }
            const float m2_b = block_sum(acc[0] + acc[1], red_q);
            Welford st{(float)n_cta, mean_b, m2_b};
            if constexpr (CL > 1) {
                if (threadIdx.x == 0) slot_w[p] = st;
                cluster.sync();
                st = lane < CL ? *cluster.map_shared_rank(&slot_w[p], lane) : Welford{0.f, 0.f, 0.f};
                st = warp_welford(st);          // every warp merges the same states in the same order
            }
            mean = st.mean;
            rstd = rsqrtf(fmaxf(st.m2 / n, 0.f) + eps);
        } else {
            float acc[2] = {0.f, 0.f};
#pragma unroll
            for (int j = 0; j < NC; ++j) {
                float v[VEC];
                unpack_raw(Slice::get(buf, j), v);
#pragma unroll
                for (int k = 0; k < VEC; ++k) acc[k & 1] = fmaf(v[k], v[k], acc[k & 1]);
            }
            float ss = block_sum(acc[0] + acc[1], red_s);
            if constexpr (CL > 1) {
                if (threadIdx.x == 0) slot_f[p] = ss;
                cluster.sync();
                ss = warp_sum(lane < CL ? *cluster.map_shared_rank(&slot_f[p], lane) : 0.f);
            }
            rstd = rsqrtf(ss / n + eps);
        }
        if constexpr (CL == 1) __syncthreads();  // red_s / red_q are rewritten by the next row

        T* y_row = y + (size_t)r * n;
#pragma unroll
        for (int j = 0; j < NC; ++j) {
            const int e0 = Slice::col(first, j);
            if (e0 < n) {
                scatter_chunk(y_row, e0, n, vec_ok, norm_chunk<LN, VEC>(Slice::get(buf, j), qw[j], qb[j], mean, rstd));
            }
        }
    }
    cp_async_wait<0>();                         // no copy may land after the CTA has exited
    if constexpr (CL > 1) cluster.sync();       // keep our slots alive until the cluster's last reads
}
// [[/snippet]]

// [[snippet: layernorm_v7]]
template <typename T, int NC, int THREADS, int CL>
__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(THREADS, (stream_min_blocks<NC, THREADS, 8 * NC>()))
layernorm_v7_stream(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                    T* __restrict__ y, int rows, int n, float eps) {
    norm_stream<true, T, NC, THREADS, CL>(x, w, b, y, rows, n, eps);
}
// [[/snippet]]

// [[snippet: rmsnorm_v5]]
template <typename T, int NC, int THREADS, int CL>
__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(THREADS, (stream_min_blocks<NC, THREADS, 4 * NC>()))
rmsnorm_v5_stream(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y, int rows, int n,
                  float eps) {
    norm_stream<false, T, NC, THREADS, CL>(x, w, nullptr, y, rows, n, eps);
}
// [[/snippet]]
