// chain.cu: how long a register-sourced wgmma m64nNk16 (sm_90a) takes when it adds into the accumulators the
// previous one wrote, against CHAINS independent accumulators used in turn (chapter 13, w4a16_sm90.chain_cycles).
// Each warpgroup of the CTA issues iters x CHAINS wgmmas, keeping 4 groups in flight as the W4A16 kernel does,
// and thread 0 of each warpgroup reports the clock64 cycles its loop took. A and B hold ones: the tensor cores'
// speed does not depend on the values.
#include "hopper_common.cuh"   // (kernels/hgemm) gmma_desc_sw128, atom_aligned, SW128_ATOM
#include "int4.cuh"             // BF16X2_ONE
#include "wgmma_rs_sm90.cuh"

constexpr int CHAIN_SMEM = 64 * 128;   // B: up to 64 rows of 16 k (bf16), 128-byte swizzled rows

template <int N, int CHAINS>
__global__ void wgmma_chain(int iters, long long* __restrict__ cycles, float* __restrict__ sink) {
    extern __shared__ __align__(128) unsigned char smem_raw[];
    unsigned char* smem = atom_aligned(smem_raw);
    for (int i = threadIdx.x; i < CHAIN_SMEM / 4; i += blockDim.x) reinterpret_cast<unsigned*>(smem)[i] = BF16X2_ONE;
    fence_proxy_async_smem();              // the generic-proxy writes above, before the wgmmas read them
    __syncthreads();
    float acc[CHAINS][N / 2];
#pragma unroll
    for (int c = 0; c < CHAINS; ++c)
#pragma unroll
        for (int e = 0; e < N / 2; ++e) acc[c][e] = 0.f;
    const unsigned a[4] = {BF16X2_ONE, BF16X2_ONE, BF16X2_ONE, BF16X2_ONE};
    const unsigned long long desc = gmma_desc_sw128(smem, 16, SW128_ATOM);
    warpgroup_sync();
    const long long t0 = clock64();
    for (int i = 0; i < iters; ++i) {
#pragma unroll
        for (int c = 0; c < CHAINS; ++c) {
            wgmma_fence();
            wgmma_m64nNk16_rs<N, 0>(acc[c], a, desc, 1);
            wgmma_commit();
            wgmma_wait<3>();
        }
    }
    wgmma_wait<0>();
    const long long t1 = clock64();
    float sum = 0.f;                       // keeps the accumulators (and so the wgmmas) alive
#pragma unroll
    for (int c = 0; c < CHAINS; ++c)
#pragma unroll
        for (int e = 0; e < N / 2; ++e) sum += acc[c][e];
    sink[blockIdx.x * blockDim.x + threadIdx.x] = sum;
    if (threadIdx.x % 128 == 0) cycles[blockIdx.x * (blockDim.x / 128) + threadIdx.x / 128] = t1 - t0;
}
