// iterator.cuh: v9's loads where the tiles divide the shape. Same job and same stash() as stage.cuh (one BK
// slice of A and B into registers, then into one shared-memory stage), for shapes where BM divides M, BN
// divides N and BK divides K: then no load can fall outside a matrix and none needs a test. Each load's
// address is a pointer worked out once per block and moved on by BK per slice.
// Why it pays: stage.cuh tests every load (row inside M? column inside N or K?) and recomputes its address
// from row * ld + col on every slice. The tests compile to branches at the top of the loop, and the loads
// sit behind them; with no tests, ptxas schedules the loads in among the FFMAs of the slice being computed.
// v9's plan picks the instance with this loader for such shapes, and stage.cuh's for every other.
#pragma once
#include "stage.cuh"

// [[snippet: sgemm_interior]]
template <int BM, int BN, int BK, int NT, bool VEC>
struct InteriorLoads : Stage<BM, BN, BK, NT, VEC> {
    using S = Stage<BM, BN, BK, NT, VEC>;
    using S::AL; using S::BL; using S::ra; using S::rb;
    static_assert(VEC, "interior loads are 16-byte loads: K, N multiples of 4 and A, B 16-byte aligned");
    static_assert(NT % (BK / 4) == 0 && NT % (BN / 4) == 0, "a thread's loads must keep one column");
    static constexpr int A_ROWS = NT / (BK / 4), B_ROWS = NT / (BN / 4);   // rows between a thread's loads
    const float* pa;                                 // &A[m0 + tid / (BK / 4)][k0 + (tid % (BK / 4)) * 4]
    const float* pb;                                 // &B[k0 + tid / (BN / 4)][n0 + (tid % (BN / 4)) * 4]

    __device__ __forceinline__ InteriorLoads(const float* __restrict__ A, const float* __restrict__ B, int M,
                                             int N, int K, int m0, int n0, int tid)
        : pa(A + (m0 + tid / (BK / 4)) * K + (tid % (BK / 4)) * 4),
          pb(B + (tid / (BN / 4)) * N + n0 + (tid % (BN / 4)) * 4) {}

    // stage.cuh's interface. Slices come in order (k0 = 0, BK, 2 BK, ...): each call loads the slice at the
    // pointers and moves them on by BK. "r * NT + NT <= ..." settles the usual case at compile time.
    __device__ __forceinline__ void load(const float* __restrict__, const float* __restrict__, int, int N, int K,
                                         int, int, int, int tid) {
#pragma unroll
        for (int r = 0; r < AL; ++r)
            if ((r + 1) * NT <= BM * BK / 4 || tid + r * NT < BM * BK / 4)
                ra[r] = *reinterpret_cast<const float4*>(pa + r * A_ROWS * K);
#pragma unroll
        for (int r = 0; r < BL; ++r)
            if ((r + 1) * NT <= BK * BN / 4 || tid + r * NT < BK * BN / 4)
                rb[r] = *reinterpret_cast<const float4*>(pb + r * B_ROWS * N);
        pa += BK;
        pb += BK * N;
    }
};
// [[/snippet]]
