// simt.cu: chapter 1, the SIMT model by measurement.
//
// Vector add c = a + b (fp32), one version per idea:
//   vector_add_v0_one_per_thread  one thread per element, grid sized to n: the textbook kernel
//   vector_add_v1_grid_stride     a fixed grid (blocks = k x SMs) walks the array in a grid-stride
//                                 loop; the grid no longer depends on n
//   vector_add_v2_float4          v1 with 16-byte loads and stores (float4), a quarter of the
//                                 instructions and four times the bytes in flight per thread; a
//                                 scalar tail takes the n % 4 last elements
//   vector_add_v3_float4_tile     the grid grows with n again, as in PyTorch: each block owns a tile
//                                 of blockDim.x * 2 float4, each thread loads 2 float4 of a and of
//                                 b before it stores; the last block takes the partial tile and tail
//
// Experiments (not versions of an op):
//   branch_by_lane / branch_by_warp  the same FMA work split into `paths` branches chosen by the
//                                    lane (divergent inside each warp) or by the warp (uniform)
//   branch_active_mask               which lanes execute each branch together (__activemask)
//   read_sum_ilp{1,2,4,8}            a read-only stream with ILP independent 16-byte loads per
//                                    thread per iteration: bytes in flight = warps x 512 B x ILP

// The multiprocessor this thread runs on (PTX special register %smid).
__device__ __forceinline__ int sm_id() {
    int id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    return id;
}

// [[snippet: vector_add_v0]]
extern "C" __global__ void vector_add_v0_one_per_thread(const float* __restrict__ a,
                                                        const float* __restrict__ b,
                                                        float* __restrict__ c, long long n) {
    // grid = ceil(n / blockDim.x): thread i owns element i
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
// [[/snippet]]

// [[snippet: vector_add_v1]]
extern "C" __global__ void vector_add_v1_grid_stride(const float* __restrict__ a,
                                                     const float* __restrict__ b,
                                                     float* __restrict__ c, long long n) {
    // grid = k x SMs blocks whatever n is; each thread strides by the whole grid
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        c[i] = a[i] + b[i];
}
// [[/snippet]]

// [[snippet: vector_add_v2]]
extern "C" __global__ void vector_add_v2_float4(const float* __restrict__ a,
                                                const float* __restrict__ b,
                                                float* __restrict__ c, long long n) {
    // a, b, c are 16-byte aligned (the launcher checks): element 4q..4q+3 is float4 number q
    const long long n4 = n >> 2;                        // whole float4 groups
    const float4* __restrict__ a4 = reinterpret_cast<const float4*>(a);
    const float4* __restrict__ b4 = reinterpret_cast<const float4*>(b);
    float4* __restrict__ c4 = reinterpret_cast<float4*>(c);
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long q = t; q < n4; q += stride) {
        const float4 x = a4[q];                         // one LDG.128 each
        const float4 y = b4[q];
        c4[q] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    }
    // scalar tail: the n % 4 (at most 3) last elements, one each for threads 0, 1, 2
    const long long k = (n4 << 2) + t;
    if (k < n) c[k] = a[k] + b[k];
}
// [[/snippet]]

// [[snippet: vector_add_v3]]
#define V3_PER_THREAD 2   // float4 per thread per input: 8 elements, 32 B of a and 32 B of b

extern "C" __global__ void vector_add_v3_float4_tile(const float* __restrict__ a,
                                                     const float* __restrict__ b,
                                                     float* __restrict__ c, long long n) {
    // block i owns float4 numbers [i * T, (i + 1) * T), T = blockDim.x * V3_PER_THREAD;
    // thread t takes base + t and base + t + blockDim.x: each warp-wide access is 512 B contiguous
    const long long n4 = n >> 2;
    const float4* __restrict__ a4 = reinterpret_cast<const float4*>(a);
    const float4* __restrict__ b4 = reinterpret_cast<const float4*>(b);
    float4* __restrict__ c4 = reinterpret_cast<float4*>(c);
    const long long base = (long long)blockIdx.x * blockDim.x * V3_PER_THREAD + threadIdx.x;
    if ((long long)(blockIdx.x + 1) * blockDim.x * V3_PER_THREAD <= n4) {
        // a whole tile, no bounds checks: all loads first (64 B in flight per thread), then stores
        float4 x[V3_PER_THREAD], y[V3_PER_THREAD];
#pragma unroll
        for (int u = 0; u < V3_PER_THREAD; ++u) {
            x[u] = a4[base + u * blockDim.x];
            y[u] = b4[base + u * blockDim.x];
        }
#pragma unroll
        for (int u = 0; u < V3_PER_THREAD; ++u)
            c4[base + u * blockDim.x] = make_float4(x[u].x + y[u].x, x[u].y + y[u].y,
                                                    x[u].z + y[u].z, x[u].w + y[u].w);
    } else {
        // the last, partial tile: checked one float4 at a time
        for (int u = 0; u < V3_PER_THREAD; ++u) {
            const long long q = base + (long long)u * blockDim.x;
            if (q < n4) {
                const float4 x = a4[q], y = b4[q];
                c4[q] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
            }
        }
    }
    if (blockIdx.x == gridDim.x - 1) {                 // scalar tail: the n % 4 last elements
        const long long k = (n4 << 2) + threadIdx.x;
        if (k < n) c[k] = a[k] + b[k];
    }
}
// [[/snippet]]

// [[snippet: branch]]
// Four independent FMA chains (ILP 4) of `iters` steps each: 8 * iters FLOP per call.
// c is a kernel argument (1.0f in the chapter), so the compiler cannot fold the chain.
__device__ __forceinline__ float fma_chains(float x, float c, float d, int iters) {
    float v0 = x, v1 = x + 1.f, v2 = x + 2.f, v3 = x + 3.f;
#pragma unroll 8
    for (int j = 0; j < iters; ++j) {
        v0 = fmaf(v0, c, d);
        v1 = fmaf(v1, c, d);
        v2 = fmaf(v2, c, d);
        v3 = fmaf(v3, c, d);
    }
    return (v0 + v1) + (v2 + v3);
}

// `paths` branches, each the same work with its own constant d = p + 1. A thread takes branch
// path = selector % paths; the loop over p is a `paths`-way switch written once.
template <bool BY_LANE>
__device__ __forceinline__ void branch_paths(const float* __restrict__ x, float* __restrict__ y,
                                             int n, int paths, int iters, float c) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const int lane = threadIdx.x & 31;                  // blockDim.x is a multiple of 32
    const int warp = i >> 5;                            // global warp index
    const int path = (BY_LANE ? lane : warp) % paths;
    const float xi = x[i];
    float r = 0.f;
    for (int p = 0; p < paths; ++p) {
        if (path == p) r = fma_chains(xi, c, (float)(p + 1), iters);
    }
    y[i] = r;
}

extern "C" __global__ void branch_by_lane(const float* __restrict__ x, float* __restrict__ y,
                                          int n, int paths, int iters, float c) {
    branch_paths<true>(x, y, n, paths, iters, c);     // lanes of one warp disagree
}

extern "C" __global__ void branch_by_warp(const float* __restrict__ x, float* __restrict__ y,
                                          int n, int paths, int iters, float c) {
    branch_paths<false>(x, y, n, paths, iters, c);    // every warp agrees with itself
}
// [[/snippet]]

// [[snippet: branch_active_mask]]
// One warp: inside branch p, record which lanes are executing it right now.
extern "C" __global__ void branch_active_mask(unsigned int* __restrict__ masks, int paths) {
    const int lane = threadIdx.x & 31;
    const int path = lane % paths;
    unsigned int m = 0u;
    for (int p = 0; p < paths; ++p) {
        if (path == p) m = __activemask();
    }
    masks[threadIdx.x] = m;
}
// [[/snippet]]

// [[snippet: read_sum]]
// Thread t of T = gridDim.x * blockDim.x reads float4 number t, t + T, t + 2T, ...: every
// warp-wide load is 512 contiguous bytes. Each iteration issues ILP independent 16-byte loads
// before it uses any of them, so a warp keeps 512 * ILP bytes in flight.
template <int ILP>
__device__ __forceinline__ void read_sum(const float4* __restrict__ x, long long n4,
                                         float* __restrict__ out, int* __restrict__ smid) {
    const long long T = (long long)gridDim.x * blockDim.x;
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    float acc[ILP];
#pragma unroll
    for (int j = 0; j < ILP; ++j) acc[j] = 0.f;
    long long i = t;
#pragma unroll 1   // no unrolling across iterations: ILP is exactly what the template says
    for (; i + (ILP - 1) * T < n4; i += ILP * T) {
        float4 v[ILP];
#pragma unroll
        for (int j = 0; j < ILP; ++j) v[j] = x[i + j * T];                 // ILP loads in flight
#pragma unroll
        for (int j = 0; j < ILP; ++j) acc[j] += (v[j].x + v[j].y) + (v[j].z + v[j].w);
    }
#pragma unroll 1
    for (; i < n4; i += T) {                                               // the last < ILP rounds
        const float4 v = x[i];
        acc[0] += (v.x + v.y) + (v.z + v.w);
    }
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < ILP; ++j) s += acc[j];
    out[t] = s;                                   // written once: the kernel is all reads
    if (threadIdx.x == 0) smid[blockIdx.x] = sm_id();
}
// [[/snippet]]

extern "C" __global__ void __launch_bounds__(256, 1) read_sum_ilp1(const float4* __restrict__ x, long long n4,
                                         float* __restrict__ out, int* __restrict__ smid) {
    read_sum<1>(x, n4, out, smid);
}
extern "C" __global__ void __launch_bounds__(256, 1) read_sum_ilp2(const float4* __restrict__ x, long long n4,
                                         float* __restrict__ out, int* __restrict__ smid) {
    read_sum<2>(x, n4, out, smid);
}
extern "C" __global__ void __launch_bounds__(256, 1) read_sum_ilp4(const float4* __restrict__ x, long long n4,
                                         float* __restrict__ out, int* __restrict__ smid) {
    read_sum<4>(x, n4, out, smid);
}
extern "C" __global__ void __launch_bounds__(256, 1) read_sum_ilp8(const float4* __restrict__ x, long long n4,
                                         float* __restrict__ out, int* __restrict__ smid) {
    read_sum<8>(x, n4, out, smid);
}
