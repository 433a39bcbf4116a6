// v03_pipeline.cu: chapter 12, hgemm v3. v2 with a STAGES-deep cp.async pipeline: tiles k+1 .. k+STAGES-1
// are in flight from global memory to their own shared-memory slots while tile k is multiplied, with no
// registers spent on them and one __syncthreads per tile instead of two. Also: one block per tile on a
// 1-D grid walking groups of GROUP_M row tiles (L2 reuse, as sgemm v9), and the tiles and stages as a
// tuned config. Off the VEC path (K or N not a multiple of 8, or a misaligned pointer) cp.async cannot
// move a chunk, so the same ring is filled through registers: tile k + STAGES - 1's global loads are
// issued before tile k's mmas and stored to shared memory after them, so their latency hides behind the
// math as the cp.async copies' does.
#include "hgemm_common.cuh"

// [[snippet: hgemm_v3]]
template <int BM, int BN, int BK, int WM, int WN, int STAGES, int GROUP_M, bool VEC>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32)
hgemm_v3_pipeline(int M, int N, int K, const bf16* __restrict__ A, const bf16* __restrict__ B, bf16* __restrict__ C) {
    constexpr int NT = (BM / WM) * (BN / WN) * 32;
    static_assert(STAGES >= 2, "at least one tile in flight while one is multiplied");
    using LA = Swizzled<BK>;
    using LB = Swizzled<BN>;
    extern __shared__ __align__(128) unsigned char smem[];
    bf16* As = reinterpret_cast<bf16*>(smem);    // [STAGES][BM][BK], swizzled
    bf16* Bs = As + STAGES * BM * BK;            // [STAGES][BK][BN], swizzled
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int wm0 = (warp / (BN / WN)) * WM, wn0 = (warp % (BN / WN)) * WN;
    int tile_m, tile_n;
    grouped_tile(blockIdx.x, (M + BM - 1) / BM, (N + BN - 1) / BN, GROUP_M, tile_m, tile_n);
    const int m0 = tile_m * BM, n0 = tile_n * BN;
    const int tiles_k = (K + BK - 1) / BK;

    auto slot_a = [&](int slot) { return As + slot * BM * BK; };
    auto slot_b = [&](int slot) { return Bs + slot * BK * BN; };

    // Prologue: tiles 0 .. STAGES-2 in flight, one commit group each (empty groups past the end keep
    // the count of groups per iteration fixed, which the wait below relies on).
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < tiles_k) {
            if (VEC) {
                load_tile_async<BM, BK, NT, LA>(slot_a(s), A, M, K, m0, s * BK);
                load_tile_async<BK, BN, NT, LB>(slot_b(s), B, K, N, s * BK, n0);
            } else {
                load_tile_sync<BM, BK, NT, LA, false>(slot_a(s), A, M, K, m0, s * BK);
                load_tile_sync<BK, BN, NT, LB, false>(slot_b(s), B, K, N, s * BK, n0);
            }
        }
        cp_async_commit();
    }
    float acc[WM / 16][WN / 8][4] = {};           // [m16 tile][n8 tile][c0..c3]
    TileChunks<BM, BK, NT> ra;                     // the element-wise path's tile in registers
    TileChunks<BK, BN, NT> rb;
    for (int kt = 0; kt < tiles_k; ++kt) {
        cp_async_wait<STAGES - 2>();   // this thread's copies of tile kt have landed ...
        __syncthreads();               // ... and everyone's; everyone is also done with tile kt - 1's slot
        const int next = kt + STAGES - 1, refill = next % STAGES;   // refill the slot tile kt - 1 used
        if (next < tiles_k) {
            if (VEC) {
                load_tile_async<BM, BK, NT, LA>(slot_a(refill), A, M, K, m0, next * BK);
                load_tile_async<BK, BN, NT, LB>(slot_b(refill), B, K, N, next * BK, n0);
            } else {
                fetch_tile<BM, BK, NT, false>(ra, A, M, K, m0, next * BK);
                fetch_tile<BK, BN, NT, false>(rb, B, K, N, next * BK, n0);
            }
        }
        cp_async_commit();
        const int slot = kt % STAGES;
        warp_tile_mma<BK, WM, WN, LA, LB>(acc, slot_a(slot), slot_b(slot), wm0, wn0, lane);
        if (!VEC && next < tiles_k) {  // the loads had the mmas' time to arrive
            put_tile<BM, BK, NT, LA>(slot_a(refill), ra);
            put_tile<BK, BN, NT, LB>(slot_b(refill), rb);
        }
    }
    cp_async_wait<0>();                // no copy may outlive the block (only empty groups remain here)
    store_tile<WM, WN, VEC>(acc, C, M, N, m0 + wm0, n0 + wn0, lane);
}
// [[/snippet]]
