"""The W4A16 wgmma GEMM (kernels/w4a16_sm90, chapter 13) on the GPU: every instantiated config on fresh seeded inputs
with y poisoned, against the float64 reference on the bf16 dequantised weights, on the emulation's shapes (tails
in M and N, more groups than stages, tiles cut between a few CTAs) and on the book's sizes on the full grid;
repeated launches bit-identical (the stream-K sums run in a fixed order and the kernel resets its counters).
Times nothing. Skips without a GPU, or on one without wgmma (sm_90a). The seed is in every message."""
import pytest

pytestmark = pytest.mark.gpu
SEED = 913
# (M, K, N, CTAs): the emulation's cases (tests/test_w4a16_sm90_emulated.py), then the book's sizes
SMALL = [(1, 128, 64, 1), (16, 384, 256, 4), (17, 256, 96, 3), (33, 384, 160, 5), (64, 512, 128, 3),
         (16, 1280, 64, 1), (32, 1024, 256, 3), (5, 256, 640, 2)]
BOOK = [(16, 8192, 8192, None), (32, 8192, 8192, None), (64, 8192, 8192, None), (16, 8192, 28672, None),
        (64, 28672, 8192, None), (37, 4096, 4000, None)]


@pytest.fixture(autouse=True)
def needs_wgmma():
    from utils.gpu import supports
    if not supports("wgmma") or not supports("tma"):
        pytest.skip("needs a GPU with wgmma and TMA (sm_90a)")


def _seed(*what) -> int:
    import zlib
    return (SEED * 1_000_003 + zlib.crc32(repr(what).encode())) % 2**31


def _case(M, K, N, seed):
    """(x, qwgmma, qzeros, scales, out poisoned) of a random problem and its float64 reference (CuPy), computed from
    the codes themselves: x @ ((q - z) s rounded to bf16), the rounding the kernel's hmul2 does (the host test checks
    W.reference against the same)."""
    import cupy
    from kernels import w4a16_sm90 as W
    from kernels.quant import formats as F
    from utils.arrays import bf16
    from utils.check import poisoned
    q, z, s = F.random_int4_problem(K, N, seed=seed)
    x = cupy.random.RandomState(seed).standard_normal((M, K), dtype=cupy.float32).astype(bf16())
    w = F.dequantize_int4(q, s.astype(cupy.float32), z).astype(bf16()).astype(cupy.float64)
    args = (x, W.pack_wgmma(q), F.pack_gptq(q, z)[1], s, poisoned((M, N), bf16()))
    return args, x.astype(cupy.float64) @ w


def _name(case):
    return "x".join(str(v) for v in case[:3]) + ("" if case[3] is None else f"-ctas{case[3]}")


@pytest.mark.parametrize("case", SMALL + BOOK, ids=_name)
def test_every_config_matches_the_reference(case):
    from kernels import w4a16_sm90 as W
    from utils.check import assert_close, poison
    M, K, N, ctas = case
    seed = _seed(*case)
    args, ref = _case(M, K, N, seed)
    v = W.W4A16_WGMMA["v1_rs"]
    problem = v.validate(*args, ctas=ctas)
    for config in v.all_configs(problem):
        poison(args[-1])
        v(*args, ctas=ctas, config=config)
        assert_close(args[-1], ref, dtype="bfloat16", name=f"{v.name} {config} M={M} K={K} N={N} ctas={ctas} "
                                                          f"(seed {seed})")


@pytest.mark.parametrize("case", [(16, 8192, 8192, None), (33, 384, 160, 5)], ids=_name)
def test_repeated_launches_are_bit_identical(case):
    import cupy
    from kernels import w4a16_sm90 as W
    M, K, N, ctas = case
    seed = _seed("repeat", *case)
    args, _ = _case(M, K, N, seed)
    run = W.W4A16_WGMMA["v1_rs"].bind(*args, ctas=ctas)
    run()
    first = args[-1].copy()
    for _ in range(5):                       # a counter left non-zero would make the next launch sum wrong partials
        run()
        assert cupy.array_equal(args[-1].view(cupy.uint16), first.view(cupy.uint16)), f"{_name(case)} (seed {seed})"


def test_rejects_unaligned_x_on_the_device():
    import cupy
    from kernels import w4a16_sm90 as W
    from utils.arrays import bf16
    args, _ = _case(16, 256, 128, _seed("unaligned"))
    buf = cupy.zeros(16 * 256 + 8, dtype=bf16())
    x = buf[8:].reshape(16, 256)                  # 16 bytes past an allocation: not 128-byte aligned
    with pytest.raises(ValueError, match="128-byte aligned"):
        W.W4A16_WGMMA["v1_rs"](x, *args[1:])


def test_two_accumulator_chains_beat_one():
    """chain_cycles: the accumulators check inside it, and the reason CHAINS = 2 (rs_common.cuh): at n = 16 two chains
    in turn take well under one chain's cycles per wgmma."""
    from kernels import w4a16_sm90 as W
    one, two = W.chain_cycles(16, 1), W.chain_cycles(16, 2)
    assert 0 < two < 0.75 * one, f"cycles per m64n16k16: one chain {one:.1f}, two chains {two:.1f}"


def test_ablations_build_and_launch():
    """Each ablation compiles and runs on a book-sized problem; with the dequant skipped the output differs from
    the kernel's (the define reaches the source)."""
    import cupy
    from kernels import w4a16_sm90 as W
    (x, qw, qz, s, out), _ = _case(16, 1024, 256, _seed("ablation"))
    W.W4A16_WGMMA["v1_rs"](x, qw, qz, s, out)
    full = out.copy()
    for what in W.ABLATIONS:
        W.ablation(what)(x, qw, qz, s, out)
    W.ablation("skip dequant")(x, qw, qz, s, out)
    cupy.cuda.get_current_stream().synchronize()
    assert not bool(cupy.array_equal(out, full)), "skip dequant left the output unchanged: the define is not read"


def test_cta_timeline_is_ordered_per_cta():
    """Every CTA of a book-sized launch stamps its start, its first full stage and its end, in that order."""
    from kernels import w4a16_sm90 as W
    args, _ = _case(16, 8192, 8192, _seed("timeline"))
    t = W.cta_timeline(W.with_timeline(), *args, reps=3)
    from utils.hardware import facts
    assert t.shape == (facts().sms, 3) and t[:, 0].min() == 0
    assert (t[:, 0] <= t[:, 1]).all() and (t[:, 1] < t[:, 2]).all(), t[:5]
