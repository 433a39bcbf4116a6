"""The W4A16 wgmma GEMM's host side on a CPU (kernels/w4a16_sm90): the prepack against wgmma's A fragment as
CUTLASS lays it out, its round trips, the reference, the plans (grid, block, shared memory, TMA boxes, the
stream-K partition and its workspace) and the ValueErrors of ``problem``."""
import numpy as np
import pytest

from kernels import w4a16_sm90 as W
from kernels.quant import formats as F
from tests.fakes import FakeDeviceArray
from utils.arrays import bf16
from utils.version import Unsupported, Workspace

V1 = W.W4A16_WGMMA["v1_rs"]


def codes(rng, K, N):
    return rng.integers(0, 16, (K, N)).astype(np.uint8)


# --- the prepack ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("K,N", [(64, 64), (128, 96), (384, 200), (256, 1000)])
def test_pack_wgmma_round_trips(rng, K, N):
    q = codes(rng, K, N)
    qw = W.pack_wgmma(q)
    assert qw.shape == (W.ceil_div(N, 64), K // 64, 128, 4) and qw.dtype == np.int32 and qw.flags.c_contiguous
    assert np.array_equal(W.unpack_wgmma(qw, N), q)


@pytest.mark.parametrize("K,N", [(64, 16), (128, 48), (192, 96)])
def test_unpack_mma_inverts_chapter_9s_pack_mma(rng, K, N):
    q = codes(rng, K, N)
    assert np.array_equal(W.unpack_mma(F.pack_mma(q)), q)


def cutlass_a_element(tid: int, reg: int, half: int) -> tuple[int, int]:
    """(m, k) of the bf16 value in register ``reg`` (low or high ``half``) of thread ``tid`` of wgmma's A (64 x 16),
    from CUTLASS v4.7.0 GMMA::ALayout_64x16 (include/cute/atom/mma_traits_sm90_gmma.hpp): thread (4, 8, 4) :
    (128, 1, 16), value (2, 2, 2) : (64, 8, 512) over the column-major tile (offset m + 64 k); value v = 2 reg +
    half."""
    t0, t1, t2 = tid % 4, (tid // 4) % 8, tid // 32
    v = 2 * reg + half
    v0, v1, v2 = v % 2, (v // 2) % 2, v // 4
    offset = 128 * t0 + t1 + 16 * t2 + 64 * v0 + 8 * v1 + 512 * v2
    return offset % 64, offset // 64


def a_registers_of(word: int) -> list[tuple[int, int]]:
    """The kernel's path from one word to wgmma's four A registers, as (low, high) nibbles: int4x8_to_bf16x8_biased
    pairs nibbles (i, i + 4) into b[i], dequant_b_frags keeps that order, a_fragment sends (b0, b2, b1, b3) to a0..a3."""
    b = [((word >> (4 * i)) & 15, (word >> (4 * (i + 4))) & 15) for i in range(4)]
    return [b[0], b[2], b[1], b[3]]


def test_each_thread_gets_its_a_fragment(rng):
    """Every value of every A register of every thread, for every k16 step and slice, is the code CUTLASS's A layout
    puts there: the prepack, chapter 9's nibble pairing and the kernel's register order agree."""
    K, N = 128, 128
    q = codes(rng, K, N)
    qw = W.pack_wgmma(q).view(np.uint32)
    for s in range(N // 64):
        for c in range(K // 64):
            for tid in range(128):
                for j in range(4):
                    regs = a_registers_of(int(qw[s, c, tid, j]))
                    for r in range(4):
                        for half in range(2):
                            m, k = cutlass_a_element(tid, r, half)
                            assert regs[r][half] == q[64 * c + 16 * j + k, 64 * s + m], (s, c, tid, j, r, half)


def test_cutlass_layout_is_the_ptx_fragment():
    """The brief of wgmma_rs_sm90.cuh: a0 = A[g][2t, 2t+1], a1 = A[g+8][..], a2 = A[g][2t+8, 2t+9], a3 = A[g+8][..],
    warp w on rows 16 w ..; the CUTLASS layout says the same."""
    for tid in range(128):
        w, g, t = tid // 32, (tid % 32) // 4, tid % 4
        for r in range(4):
            for half in range(2):
                assert cutlass_a_element(tid, r, half) == (16 * w + g + 8 * (r & 1), 2 * t + half + 8 * (r >> 1))


def test_prepare_takes_gptq(rng):
    K, N = 256, 96
    q, z = codes(rng, K, N), codes(rng, K // 128, N)
    qweight, qzeros = F.pack_gptq(q, z)
    s = np.full((K // 128, N), 0.01, np.float32).astype(bf16())
    qw, qz, ss = V1.prepare(qweight, qzeros, s)
    assert np.array_equal(qw, W.pack_wgmma(q)) and qz is qzeros and ss is s


def test_pack_rejects_k_not_a_multiple_of_64():
    with pytest.raises(ValueError, match="multiple of 64"):
        W.pack_wgmma(np.zeros((96, 64), np.uint8))


# --- the reference and the cost model --------------------------------------------------------------------------------

def test_reference_is_x_times_bf16_dequantised_weights(rng):
    M, K, N = 3, 256, 64
    q, z, s = F.random_int4_problem(K, N, xp=np, seed=5)
    x = rng.standard_normal((M, K)).astype(np.float32).astype(bf16())
    w = np.empty((K, N))
    for k in range(K):                                   # (q - z) s, rounded to bf16 once: the kernel's hmul2
        w[k] = ((q[k].astype(np.float64) - z[k // 128]) * s[k // 128].astype(np.float64)).astype(np.float32).astype(bf16())
    got = W.reference(x, W.pack_wgmma(q), F.pack_gptq(q, z)[1], s)
    assert got.dtype == np.float64 and np.allclose(got, x.astype(np.float64) @ w, rtol=1e-12, atol=1e-12)


def test_cost_model():
    assert W.nbytes(16, 8192, 8192) == 8192 * 8192 // 2 + 64 * 8192 * 2 + 64 * 8192 // 2 + 2 * 16 * 8192 * 2
    assert W.flops(16, 8192, 8192) == 2.0 * 16 * 8192 * 8192


# --- problems and plans ----------------------------------------------------------------------------------------------

def arrays(M, K, N, **over):
    """Fake device arrays for a problem (each at its own 256-byte aligned address); ``over`` replaces some."""
    shapes = {"x": ((M, K), bf16()), "qwgmma": ((W.ceil_div(N, 64), K // 64, 128, 4), np.int32),
              "qzeros": ((K // 128, N // 8), np.int32), "scales": ((K // 128, N), bf16()), "out": ((M, N), bf16())}
    out = []
    for i, (name, (shape, dtype)) in enumerate(shapes.items()):
        out.append(over.get(name, FakeDeviceArray(shape, dtype, ptr=(i + 1) << 32)))
    return out


def test_plan_at_m16_8192():
    p = V1.validate(*arrays(16, 8192, 8192))
    assert V1.resolve_config(p) == W.RsConfig(16, 4, 1, 6)
    (ln,) = V1.launches(p)
    assert ln.kernel == "w4a16_wgmma_rs<16, 4, 1, 6>" and ln.block == (544, 1, 1)   # 4 consumer warpgroups + 1 warp
    assert ln.grid == (132, 1, 1)                        # one CTA per SM of the H200 (a CPU plan)
    assert ln.smem == W.smem_bytes(W.RsConfig(16, 4, 1, 6)) <= 227 * 1024
    map_x, map_w, map_s, map_z = ln.args[:4]
    assert (map_x.shape, map_x.box, map_x.swizzle) == ((16, 8192), (16, 64), 128)
    assert (map_w.shape, map_w.box, map_w.dtype) == ((128 * 128, 256), (2, 256), np.dtype(np.uint64))
    assert (map_s.shape, map_s.box) == ((64, 8192), (1, 256))        # BN = 256 columns a tile
    assert (map_z.shape, map_z.box) == ((64, 1024), (1, 32))
    ws, counters = ln.args[5:7]
    max_contrib = int(ln.args[-1])
    assert isinstance(ws, Workspace) and ws.shape == (32 * max_contrib * 256 * 16,)
    assert counters.shape == (32 * 4,) and counters.fill == 0 and not counters.every_launch


@pytest.mark.parametrize("config", W.RS_CONFIGS, ids=str)
def test_every_config_fits_a_block(config):
    p = V1.validate(*arrays(config.tok, 8192, 28672))
    (ln,) = V1.launches(p, config)
    assert ln.smem <= 227 * 1024 and ln.block[0] == 128 * config.consumers + 32
    assert W.stage_bytes(config) % 1024 == 0


@pytest.mark.parametrize("M,tok", [(1, 16), (16, 16), (17, 32), (32, 32), (33, 64), (64, 64)])
def test_default_token_tile(M, tok):
    assert V1.resolve_config(V1.validate(*arrays(M, 256, 128))).tok == tok


def test_configs_too_small_for_m_are_refused():
    p = V1.validate(*arrays(20, 256, 128))
    assert all(c.tok >= 20 for c in V1.all_configs(p))
    with pytest.raises(ValueError, match="not instantiated"):
        V1.launches(p, W.RsConfig(16, 2, 1, 8))


def test_more_than_64_tokens_is_unsupported():
    p = V1.validate(*arrays(65, 256, 128))
    with pytest.raises(Unsupported, match="M = 65"):
        V1.launches(p)


def device_partition(tiles: int, groups: int, ctas: int):
    """The kernel's Stripe: CTA c's units [c U / P, (c + 1) U / P) and the owner of a unit."""
    U = tiles * groups
    return [range(c * U // ctas, (c + 1) * U // ctas) for c in range(ctas)], (lambda u: ((u + 1) * ctas - 1) // U)


@pytest.mark.parametrize("M,K,N,ctas", [(16, 8192, 8192, None), (16, 8192, 28672, None), (64, 28672, 8192, None),
                                        (16, 384, 256, 4), (5, 256, 640, 2), (1, 128, 64, 7)])
def test_stream_k_covers_every_unit_once_within_the_workspace(M, K, N, ctas):
    p = V1.validate(*arrays(M, K, N), ctas=ctas)
    c = V1.resolve_config(p)
    (ln,) = V1.launches(p)
    bn, groups = 64 * c.consumers * c.slices, K // 128
    tiles = W.ceil_div(N, bn)
    ranges, owner = device_partition(tiles, groups, ln.grid[0])
    units = [u for r in ranges for u in r]
    assert units == list(range(tiles * groups)) and all(len(r) >= 1 for r in ranges)
    contributors = max(owner(t * groups + groups - 1) - owner(t * groups) + 1 for t in range(tiles))
    assert contributors <= int(ln.args[-1])
    assert ln.args[5].shape[0] >= tiles * int(ln.args[-1]) * bn * c.tok


# --- validation ----------------------------------------------------------------------------------------------------

def test_rejects_host_arrays():
    x = np.zeros((16, 256), bf16())
    with pytest.raises(ValueError, match="x: expected a CUDA device array"):
        V1.validate(x, *arrays(16, 256, 128)[1:])


@pytest.mark.parametrize("name,replacement,match", [
    ("x", FakeDeviceArray((16, 256), np.float32, ptr=1 << 32), "x: expected dtype bfloat16"),
    ("x", FakeDeviceArray((16, 256), bf16(), ptr=(1 << 32) + 64), "x: expected a 128-byte aligned pointer"),
    ("out", FakeDeviceArray((15, 128), bf16(), ptr=5 << 32), "out: expected 16 rows"),
    ("out", FakeDeviceArray((16, 128), np.float16, ptr=5 << 32), "out: expected dtype bfloat16"),
    ("qwgmma", FakeDeviceArray((2, 4, 32, 4), np.int32, ptr=2 << 32), r"qwgmma \(pack_wgmma\): expected shape"),
    ("qwgmma", FakeDeviceArray((2, 4, 128, 4), np.uint32, ptr=2 << 32), "expected dtype int32"),
    ("qzeros", FakeDeviceArray((2, 128), np.int32, ptr=3 << 32), r"qzeros: expected shape \(2, 16\)"),
    ("scales", FakeDeviceArray((2, 128), np.float32, ptr=4 << 32), "scales: expected dtype bfloat16"),
    ("scales", FakeDeviceArray((2, 128), bf16(), ptr=(4 << 32) + 2), "scales: expected a 16-byte aligned"),
])
def test_rejects_bad_arguments(name, replacement, match):
    with pytest.raises(ValueError, match=match):
        V1.validate(*arrays(16, 256, 128, **{name: replacement}))


@pytest.mark.parametrize("M,K,N,match", [(16, 200, 128, "multiple of the group size"),
                                         (16, 256, 200, "not a multiple of 32"), (16, 256, 40, "not a multiple of 32")])
def test_rejects_shapes_the_kernel_cannot_take(M, K, N, match):
    x = FakeDeviceArray((M, K), bf16(), ptr=1 << 32)
    out = FakeDeviceArray((M, N), bf16(), ptr=5 << 32)
    with pytest.raises(ValueError, match=match):
        V1.validate(x, FakeDeviceArray((1, 1, 128, 4), np.int32, ptr=2 << 32),
                    FakeDeviceArray((1, 1), np.int32, ptr=3 << 32), FakeDeviceArray((1, 1), bf16(), ptr=4 << 32), out)


@pytest.mark.parametrize("ctas", [0, -3, True])
def test_rejects_bad_ctas(ctas):
    with pytest.raises(ValueError, match="ctas"):
        V1.validate(*arrays(16, 256, 128), ctas=ctas)


def test_the_op_is_its_own_registry():
    from kernels.quant import GEMM
    assert W.W4A16_WGMMA.op == "w4a16_wgmma" and list(W.W4A16_WGMMA) == ["v1_rs"]
    assert V1.requires == ("wgmma", "tma") and V1.source is W.V1_SOURCE
    assert "v1_rs" not in GEMM


def test_ablation_names_are_checked():
    with pytest.raises(ValueError, match="expected one of"):
        W.ablation("skip everything")
    assert W.ablation("stream only").source.defines == (("W4A16_SKIP_DEQUANT", "1"), ("W4A16_SKIP_MMA", "1"))


@pytest.mark.parametrize("n, chains, warpgroups", [(8, 1, 1), (16, 3, 1), (16, 1, 4), (16, 1, 0)])
def test_chain_cycles_rejects_what_is_not_instantiated(n, chains, warpgroups):
    with pytest.raises(ValueError, match="chain_cycles"):
        W.chain_cycles(n, chains, warpgroups)


def test_ladder_shapes_fit_the_op():
    """Every shape the chapter checks or times passes the op's shape rules and has a config that holds its M."""
    from kernels.w4a16_sm90 import ladder
    for M, K, N in ladder.ODD + ladder.SHAPES:
        W.check_shapes(M, K, N)
        assert any(c.tok >= M for c in W.RS_CONFIGS)
    assert {M for M, _, _ in ladder.SHAPES} == set(ladder.BARS)


def test_timeline_builds_only_from_v1_rs():
    t = W.with_timeline(W.ablation("stream only"))
    assert ("W4A16_TIMELINE", "1") in t.source.defines and ("W4A16_SKIP_MMA", "1") in t.source.defines
    with pytest.raises(ValueError, match="expected a version from with_timeline"):
        W.cta_timeline(W.W4A16_WGMMA["v1_rs"])
