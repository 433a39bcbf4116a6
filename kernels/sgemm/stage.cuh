// stage.cuh: the double-buffered tile loads of sgemm v7-v9. load() issues the global loads of one BK slice
// of A and B into registers and returns at once (nothing waits for them until the registers are read);
// stash() writes those registers into one shared-memory stage, A transposed into v6's XOR layout.
// The caller computes on the other stage in between, which is what hides the loads' latency.
#pragma once
#include "vec4.cuh"
#include "atile.cuh"

// [[snippet: sgemm_stage]]
// NT threads share the loads: float4 number i of the A slice is row i / (BK / 4), k (i % (BK / 4)) * 4; of the
// B slice, row i / (BN / 4), column (i % (BN / 4)) * 4. Each thread takes i = tid, tid + NT, ...
template <int BM, int BN, int BK, int NT, bool VEC>
struct Stage {
    using AT = ATile<BM, BK, 2>;
    static constexpr int A_SIZE = AT::SIZE, B_SIZE = BK * BN;         // floats per stage
    static constexpr int AL = (BM * BK / 4 + NT - 1) / NT;             // float4 loads of A per thread
    static constexpr int BL = (BK * BN / 4 + NT - 1) / NT;             // ... of B
    float4 ra[AL], rb[BL];                                             // the slice in flight

    Stage() = default;
    // What warptile.cuh constructs its loads with: Stage needs nothing, iterator.cuh's TileIter works out
    // its pointers and predicates here.
    __device__ __forceinline__ Stage(const float*, const float*, int, int, int, int, int, int) {}

    __device__ __forceinline__ void load(const float* __restrict__ A, const float* __restrict__ B, int M, int N,
                                         int K, int m0, int n0, int k0, int tid) {
#pragma unroll
        for (int r = 0; r < AL; ++r) {
            const int i = tid + r * NT;
            if (i < BM * BK / 4) ra[r] = load4<VEC>(A, m0 + i / (BK / 4), M, k0 + (i % (BK / 4)) * 4, K, K);
        }
#pragma unroll
        for (int r = 0; r < BL; ++r) {
            const int i = tid + r * NT;
            if (i < BK * BN / 4) rb[r] = load4<VEC>(B, k0 + i / (BN / 4), K, n0 + (i % (BN / 4)) * 4, N, N);
        }
    }

    __device__ __forceinline__ void stash(float* As, float* Bs, int tid) const {
#pragma unroll
        for (int r = 0; r < AL; ++r) {
            const int i = tid + r * NT;
            if (i < BM * BK / 4) {
                const int m = i / (BK / 4), k = (i % (BK / 4)) * 4;
                As[AT::at(k + 0, m)] = ra[r].x; As[AT::at(k + 1, m)] = ra[r].y;
                As[AT::at(k + 2, m)] = ra[r].z; As[AT::at(k + 3, m)] = ra[r].w;
            }
        }
#pragma unroll
        for (int r = 0; r < BL; ++r) {
            const int i = tid + r * NT;
            if (i < BK * BN / 4) *reinterpret_cast<float4*>(&Bs[(i / (BN / 4)) * BN + (i % (BN / 4)) * 4]) = rb[r];
        }
    }
};
// [[/snippet]]
