// mma_peak.cu: chapter 12's ceiling for the Ampere way, the rate at which this GPU retires
// mma.sync.m16n8k16 bf16 (fp32 accumulation) with nothing else in the way: each warp keeps CHAINS
// independent accumulators and feeds them the same register fragments ITERS times, so no memory
// instruction and no dependence limits the loop. The fragments come from the host (random bits: the card's
// clocks follow bit activity), and warp 0 of block 0 writes its summed accumulators as D [16][8], so the run
// is checked: D = CHAINS * iters * (A @ B).
#include "mma_sm80.cuh"

// [[snippet: mma_peak]]
template <int CHAINS>
__global__ void __launch_bounds__(256)
hgemm_mma_peak(const unsigned* __restrict__ frags, int iters, float* __restrict__ D) {
    const int lane = threadIdx.x % 32;
    const unsigned a[4] = {frags[lane * 6], frags[lane * 6 + 1], frags[lane * 6 + 2], frags[lane * 6 + 3]};
    const unsigned b0 = frags[lane * 6 + 4], b1 = frags[lane * 6 + 5];
    float acc[CHAINS][4] = {};
    for (int i = 0; i < iters; ++i)
#pragma unroll
        for (int c = 0; c < CHAINS; ++c) mma_m16n8k16_bf16(acc[c], a, b0, b1);
    if (blockIdx.x == 0 && threadIdx.x < 32) {
        const int g = lane >> 2, t = lane & 3;
        for (int r = 0; r < 4; ++r) {
            float s = 0.f;
            for (int c = 0; c < CHAINS; ++c) s += acc[c][r];
            D[(g + 8 * (r >> 1)) * 8 + 2 * t + (r & 1)] = s;
        }
    }
}
// [[/snippet]]
