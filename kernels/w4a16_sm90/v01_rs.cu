// v01_rs.cu: W4A16 GEMM v1 on Hopper's wgmma (sm_90a), Machete's idea with chapter 9's arithmetic: the INT4
// weights are the register operand. y^T [N, M] = W^T [N, K] x^T [K, M]; per k16 step each consumer thread turns
// one 32-bit word of prepacked weights into its four A registers (dequant_b_frags) and its warpgroup issues
// wgmma.m64nTOKk16 with A from registers and B = x's tile from shared memory. TMA streams the stages (x, the
// weight records, the group's scales and zero points) through a ring fed by one producer thread; the grid is one
// CTA per SM over a stream-K partition of (n tile, group) units, so every SM streams the same share of the
// weights whatever N is; tiles cut between CTAs meet in an fp32 workspace, summed in a fixed order.
// Layouts and helpers: rs_common.cuh. Requires K % 128 == 0, N % 32 == 0, M <= TOK (the plan checks).
#include "rs_common.cuh"

namespace w4a16_sm90 {

// [[snippet: w4a16_wgmma_v1]]
// One stage (one group, 8 k16 steps) into this warpgroup's accumulators (SL slices of 64 columns); the first
// step of a tile segment (`fresh`) ignores what they held (scale-d = 0: no ordinary code writes them, which would
// serialize the wgmmas, C7515). R = ring(SL) wgmma groups stay in flight; the A registers of step j are rewritten
// only after the group that read them (step j - R) is done. The stage read before (`pending`) is handed back to
// the producer as soon as its last group is done: after the wait of step R - 1.
template <int TOK, int SL, int NS, int R = ring(SL)>
__device__ __forceinline__ void stage_mma(const unsigned char* st, float (&acc)[SL][CHAINS][TOK / 2],
                                          unsigned (&a)[R][SL][4], int& pending, unsigned long long* empty,
                                          bool fresh) {
    using S = Stage<TOK, NS>;
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
    __nv_bfloat162 zb[SL][2], sb[SL][2];
    uint4 wq[SL][2];                                          // [slice][k64 record]: one word per k16 step
#pragma unroll
    for (int sl = 0; sl < SL; ++sl) {
        slice_side<TOK, NS>(st, wg * SL + sl, zb[sl], sb[sl]);
#pragma unroll
        for (int r = 0; r < 2; ++r)
            wq[sl][r] = reinterpret_cast<const uint4*>(st + S::W_OFF + (wg * SL + sl) * S::W_SLICE + r * RECORD)[tid];
    }
#pragma unroll
    for (int j = 0; j < STEPS; ++j) {
        wgmma_wait<R - 1>();
        if (j == R - 1 && pending >= 0) {
            if (tid == 0) mbarrier_arrive(&empty[pending]);
            pending = -1;
        }
#pragma unroll
        for (int sl = 0; sl < SL; ++sl) {
            const uint4 w4 = wq[sl][j / 4];
            const unsigned word = j % 4 == 0 ? w4.x : j % 4 == 1 ? w4.y : j % 4 == 2 ? w4.z : w4.w;
#ifdef W4A16_SKIP_DEQUANT   // ablation (chapter 13 times it; the output is wrong): the raw word as A
            a[j % R][sl][0] = word; a[j % R][sl][1] = word ^ 1u; a[j % R][sl][2] = word ^ 2u; a[j % R][sl][3] = word ^ 3u;
#else
            a_fragment(word, zb[sl], sb[sl], a[j % R][sl]);
#endif
        }
        wgmma_fence();                                        // the A registers were written by ordinary code
#pragma unroll
        for (int sl = 0; sl < SL; ++sl)
#ifdef W4A16_SKIP_MMA       // ablation: no wgmma, the A registers still computed (kept alive by the asm)
            asm volatile("" :: "r"(a[j % R][sl][0]), "r"(a[j % R][sl][1]), "r"(a[j % R][sl][2]), "r"(a[j % R][sl][3]));
#else
            wgmma_m64nNk16_rs<TOK, 0>(acc[sl][j % CHAINS], a[j % R][sl], x_desc<TOK>(st, j), j >= CHAINS || !fresh);
#endif
        wgmma_commit();
    }
}

// The consumers of one warpgroup: the CTA's units tile segment by tile segment. Within a segment ring(SL) - 1 wgmma
// groups stay in flight from stage to stage; at its end every group is waited for, the stage freed and the tile
// flushed: straight to y when this CTA covered the whole tile, else into the workspace at the CTA's rank among the
// tile's contributors, the last of which sums the partials in rank order. (A flush inside the stage loop, with
// groups in flight around its back edge, made ptxas serialize every wgmma: C7518.)
template <int TOK, int C, int SL, int STAGES>
__device__ __forceinline__ void consume(unsigned char* smem, unsigned long long* full, unsigned long long* empty,
                                        int* flags, const Stripe& sp, __nv_bfloat16* __restrict__ y,
                                        float* __restrict__ ws, unsigned* __restrict__ counters, int M, int N,
                                        int max_contrib) {
    constexpr int NS = C * SL;
    using S = Stage<TOK, NS>;
    const int wg = threadIdx.x / 128;
    float acc[SL][CHAINS][TOK / 2];                           // [slice][chain][wgmma D: 64 columns of y x TOK tokens]
    float sum[SL][TOK / 2];                                   // the chains added, what a flush stores
    unsigned a[ring(SL)][SL][4];
    int T = (int)(sp.u0 / sp.G), first = (int)(sp.u0 % sp.G), i = 0;
    while (i < sp.count) {
        const int len = min(sp.count - i, sp.G - first);      // this segment: groups first .. first + len - 1 of T
        int pending = -1;
        for (int u = 0; u < len; ++u, ++i) {
            const int s = i % STAGES;
            mbarrier_wait(&full[s], (i / STAGES) & 1);
            if (i == 0) W4A16_STAMP(1);
            stage_mma<TOK, SL, NS>(smem + s * S::BYTES, acc, a, pending, empty, u == 0);
            pending = s;
        }
        wgmma_wait<0>();
        if (threadIdx.x % 128 == 0) mbarrier_arrive(&empty[pending]);
        add_chains<TOK, SL>(acc, sum);
        const int n0 = T * S::BN;
        auto store = [&](float v0, float v1, int n, int tok) {
            if (n0 + n >= N) return;
            if (tok < M) y[(size_t)tok * N + n0 + n] = __float2bfloat16(v0);
            if (tok + 1 < M) y[(size_t)(tok + 1) * N + n0 + n] = __float2bfloat16(v1);
        };
        if (len == sp.G) {
            for_each_pair<TOK, SL>(sum, store);
        } else {
            const int c_first = sp.owner((long long)T * sp.G), c_last = sp.owner((long long)T * sp.G + sp.G - 1);
            float* tile_ws = ws + (size_t)T * max_contrib * S::BN * TOK;      // [contributor][BN][TOK]
            float* part = tile_ws + (size_t)((int)blockIdx.x - c_first) * S::BN * TOK;
            for_each_pair<TOK, SL>(sum, [&](float v0, float v1, int n, int tok) {
                *reinterpret_cast<float2*>(part + n * TOK + tok) = make_float2(v0, v1);
            });
            if (last_contributor(counters + T * C + wg, c_last - c_first + 1, flags + wg))
                for_each_pair<TOK, SL>(sum, [&](float, float, int n, int tok) {
                    float2 sum = make_float2(0.f, 0.f);
                    for (int r = 0; r <= c_last - c_first; ++r) {          // rank order: deterministic
                        const float2 v = __ldcg(reinterpret_cast<const float2*>(tile_ws + ((size_t)r * S::BN + n) * TOK + tok));
                        sum.x += v.x;
                        sum.y += v.y;
                    }
                    store(sum.x, sum.y, n, tok);
                });
        }
        first = 0;                                            // the next tile starts at group 0
        ++T;
    }
    W4A16_STAMP(2);
}

}  // namespace w4a16_sm90

// C consumer warpgroups (threads 0 .. 128 C - 1: warpgroups must start at a multiple of 4 warps) and one producer
// warp after them. Dynamic shared memory: [STAGES][Stage] | full[STAGES] | empty[STAGES] | flag per warpgroup.
template <int TOK, int C, int SL, int STAGES>
__global__ void __launch_bounds__(128 * C + 32, 1)
w4a16_wgmma_rs(const __grid_constant__ TmaDescriptor map_x, const __grid_constant__ TmaDescriptor map_w,
               const __grid_constant__ TmaDescriptor map_s, const __grid_constant__ TmaDescriptor map_z,
               __nv_bfloat16* __restrict__ y, float* __restrict__ ws, unsigned* __restrict__ counters, int M, int K,
               int N, int max_contrib) {
    using namespace w4a16_sm90;
    constexpr int NS = C * SL;
    using S = Stage<TOK, NS>;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    unsigned char* smem = atom_aligned(smem_raw);
    auto* full = reinterpret_cast<unsigned long long*>(smem + STAGES * S::BYTES);
    auto* empty = full + STAGES;
    int* flags = reinterpret_cast<int*>(empty + STAGES);
    W4A16_STAMP(0);
    if (threadIdx.x == 0) {   // full[s]: the producer's arrive_expect_tx; empty[s] (= full[STAGES + s]): one per consumer warpgroup
        for (int b = 0; b < 2 * STAGES; ++b) mbarrier_init(&full[b], b < STAGES ? 1 : C);
        fence_barrier_init();
    }
    __syncthreads();
    const Stripe sp((N + S::BN - 1) / S::BN, K / GROUP);
    if (threadIdx.x >= 128 * C) {
        if (threadIdx.x == 128 * C) produce<TOK, NS, STAGES>(smem, full, empty, sp, &map_x, &map_w, &map_s, &map_z, K);
        return;
    }
    consume<TOK, C, SL, STAGES>(smem, full, empty, flags, sp, y, ws, counters, M, N, max_contrib);
}
// [[/snippet]]
