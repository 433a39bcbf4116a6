"""Chapter 9 host side on a CPU: packings (GPTQ, AWQ), references, cost models, version plans and validation,
and the bit tricks of the kernels (magic-number conversion, prmt pairings, the GEMV's bf16x2 numerics)
emulated in NumPy."""
import ml_dtypes
import numpy as np
import pytest

from kernels import quant as Q
from tests.fakes import FakeDeviceArray

BF16 = np.dtype(ml_dtypes.bfloat16)
SEED = 9


@pytest.fixture
def rng():
    """Seeded for every test (SEED): a failure is made again by running the test again."""
    return np.random.default_rng(SEED)


# --- packings --------------------------------------------------------------------------------------

@pytest.mark.parametrize("K,N", [(128, 8), (384, 24), (1024, 1000)])
def test_gptq_and_awq_pack_round_trip(rng, K, N):
    q = rng.integers(0, 16, (K, N)).astype(np.uint8)
    z = rng.integers(0, 16, (K // Q.GROUP, N)).astype(np.uint8)
    qw, qz = Q.pack_gptq(q, z)
    assert qw.shape == (K // 8, N) and qz.shape == (K // Q.GROUP, N // 8)
    assert qw.dtype == np.int32 and qw.flags.c_contiguous and qz.flags.c_contiguous
    assert np.array_equal(Q.unpack_nibbles(qw, 0), q) and np.array_equal(Q.unpack_nibbles(qz, 1), z)
    aw, az = Q.pack_awq(q, z)
    assert aw.shape == (K, N // 8) and az.shape == (K // Q.GROUP, N // 8)
    assert np.array_equal(Q.unpack_nibbles(aw, 1, Q.AWQ_ORDER), q)
    assert np.array_equal(Q.unpack_nibbles(az, 1, Q.AWQ_ORDER), z)


def test_gptq_nibble_i_is_row_8r_plus_i(rng):
    q = rng.integers(0, 16, (16, 3)).astype(np.uint8)
    qw = Q.pack_nibbles(q, 0).view(np.uint32)
    for r in range(2):
        for n in range(3):
            assert [(int(qw[r, n]) >> (4 * i)) & 15 for i in range(8)] == list(q[8 * r:8 * r + 8, n])


def test_awq_order_as_autoawq_packs_it(rng):
    # AutoAWQ (awq/modules/linear/gemm.py): qweight[:, col] |= intweight[:, col * 8 + order_map[i]] << (4 * i)
    q = rng.integers(0, 16, (2, 16)).astype(np.uint8)
    ref = np.zeros((2, 2), np.uint32)
    for col in range(2):
        for i in range(8):
            ref[:, col] |= q[:, col * 8 + [0, 2, 4, 6, 1, 3, 5, 7][i]].astype(np.uint32) << (4 * i)
    assert np.array_equal(Q.pack_nibbles(q, 1, Q.AWQ_ORDER).view(np.uint32), ref)


def test_pack_rejects_lengths_not_divisible_by_8():
    with pytest.raises(ValueError, match="8 nibbles"):
        Q.pack_nibbles(np.zeros((12, 4), np.uint8), 0)


# --- references ------------------------------------------------------------------------------------

def test_int4_quantization_is_within_half_a_step(rng):
    w = (rng.standard_normal((256, 40)) * 0.02).astype(np.float32)
    q, s, z = Q.quantize_int4(w)
    assert q.max() <= 15 and z.max() <= 15 and s.shape == (2, 40)
    err = np.abs(Q.dequantize_int4(q, s, z) - w)
    step = np.repeat(s, Q.GROUP, axis=0)
    assert (err <= 0.5 * step * (1 + 1e-5) + 1e-9).all()


def test_int4_quantization_rejects_partial_groups():
    with pytest.raises(ValueError, match="multiple of the group size"):
        Q.quantize_int4(np.ones((100, 8), np.float32))


def test_int8_reference_is_symmetric_and_exact_at_the_extremes(rng):
    w = rng.standard_normal((37, 999)).astype(np.float32)
    w[3] = 0.0                                        # an all-zero channel: scale 0, q 0
    q, s = Q.int8_reference(w)
    assert q.dtype == np.int8 and q.min() >= -127 and s.dtype == np.float32
    assert (np.abs(q).max(axis=1)[np.arange(37) != 3] == 127).all()
    assert s[3] == 0 and not q[3].any()
    err = np.abs(Q.int8_dequant_reference(q, s) - w)
    assert (err <= 0.5 * s[:, None] * (1 + 1e-5) + 1e-12).all()


def test_fp8_reference_hits_448_and_round_trips(rng):
    x = rng.standard_normal((199, 37)).astype(np.float32)
    q, scale = Q.fp8_reference(x)
    v = Q.fp8_decode(q)
    assert np.nanmax(np.abs(v)) == 448.0 and np.isfinite(v).all()
    rel = np.linalg.norm(v * scale - x) / np.linalg.norm(x)
    assert rel < 0.04                                 # e4m3: 3 mantissa bits, ~2^-4 relative per element


def test_gemv_reference_matches_a_dense_product(rng):
    K, N = 256, 16
    q = rng.integers(0, 16, (K, N)).astype(np.uint8)
    z = rng.integers(0, 16, (K // Q.GROUP, N)).astype(np.uint8)
    s = rng.uniform(0.01, 0.02, (K // Q.GROUP, N)).astype(np.float32)
    x = rng.standard_normal((1, K)).astype(np.float32)
    qw, qz = Q.pack_gptq(q, z)
    dense = x @ ((q.astype(np.float32) - np.repeat(z, Q.GROUP, 0)) * np.repeat(s, Q.GROUP, 0))
    assert np.allclose(Q.gemv_reference(x, qw, qz, s), dense, rtol=1e-5, atol=1e-5)


# --- cost models -----------------------------------------------------------------------------------

def test_cost_models():
    K = N = 8192
    assert Q.gemv_nbytes(K, N) == K * N // 2 + 64 * N * 2 + 64 * N // 2 + 2 * K + 2 * N
    assert Q.gemv_bf16_nbytes(K, N) == 2 * K * N + 2 * K + 2 * N
    assert Q.gemv_bf16_nbytes(K, N) / Q.gemv_nbytes(K, N) > 3.8
    assert Q.gemv_flops(K, N) == 2 * K * N
    assert Q.int8_quant_nbytes(4, 8) == 4 * 8 * 3 + 16
    assert Q.fp8_quant_nbytes(10) == 34 and Q.fp8_dequant_nbytes(10) == 34
    assert Q.convert_ops(10, 3) == 10 * 32 * 4


# --- versions and problems: validation, plans (pure, on fake device arrays) -------------------------

def gemv_args(K=256, N=64, **override):
    args = {"x": FakeDeviceArray((1, K), BF16), "qweight": FakeDeviceArray((K // 8, N), np.int32),
            "qzeros": FakeDeviceArray((K // 128, N // 8), np.int32),
            "scales": FakeDeviceArray((K // 128, N), BF16), "out": FakeDeviceArray((1, N), BF16)}
    args.update(override)
    return args


def gemv_problem_with_copies(K, N, splits=None):
    """A GEMV problem of fake arrays with the weight copies v4 and v6 read."""
    return Q.GEMV.problem(*gemv_args(K, N).values(), splits=splits,
                          qmma=FakeDeviceArray((N // 16, K // 64, 32, 4), np.int32) if N % 16 == 0 else None,
                          qtiled=FakeDeviceArray((-(-N // 32), K // 8, 32), np.int32))


def gemm_args(M=16, K=256, N=64, **override):
    args = {"a": FakeDeviceArray((M, K), BF16), "qmma": FakeDeviceArray((N // 16, K // 64, 32, 4), np.int32),
            "qzeros": FakeDeviceArray((K // 128, N // 8), np.int32), "scales": FakeDeviceArray((K // 128, N), BF16),
            "out": FakeDeviceArray((M, N), BF16)}
    args.update(override)
    return args


def test_gemv_grid_covers_every_column():
    from kernels.quant.gemv import gemv_grid
    for N in (8, 24, 1000, 8192):
        assert gemv_grid(N)[0] * Q.GEMV_COLS >= N > (gemv_grid(N)[0] - 1) * Q.GEMV_COLS


@pytest.mark.parametrize("override,msg", [
    ({"x": FakeDeviceArray((1, 200), BF16), "qweight": FakeDeviceArray((25, 64), np.int32)}, "multiple of the group size 128"),
    ({"x": FakeDeviceArray((2, 256), BF16)}, "batch 1"),
    ({"x": FakeDeviceArray((1, 256), np.float16)}, "dtype bfloat16"),
    ({"qweight": FakeDeviceArray((32, 60), np.int32)}, "multiple of 8"),
    ({"qweight": FakeDeviceArray((16, 64), np.int32)}, r"expected shape \(32, 64\)"),
    ({"qzeros": FakeDeviceArray((2, 64), np.int32)}, r"expected shape \(2, 8\)"),
    ({"scales": FakeDeviceArray((2, 64), np.float16)}, "dtype bfloat16"),
    ({"out": FakeDeviceArray((1, 64), np.float32)}, "dtype bfloat16"),
    ({"qweight": FakeDeviceArray((32, 64), np.int32, strides=(4, 128))}, "C-contiguous"),
    ({"x": np.zeros((1, 256), BF16)}, "CUDA device array"),
])
def test_gemv_problem_rejects_bad_arguments(override, msg):
    with pytest.raises(ValueError, match=msg):
        Q.GEMV.problem(**gemv_args(**override))


def test_gemv_problem_checks_the_weight_copies():
    with pytest.raises(ValueError, match=r"qmma \(pack_mma\): expected shape \(4, 4, 32, 4\)"):
        Q.GEMV.problem(**gemv_args(), qmma=FakeDeviceArray((4, 3, 32, 4), np.int32))
    with pytest.raises(ValueError, match=r"qtiled \(pack_gemv_tiled\): expected shape \(2, 32, 32\)"):
        Q.GEMV.problem(**gemv_args(), qtiled=FakeDeviceArray((2, 32, 8), np.int32))
    with pytest.raises(ValueError, match="splits"):
        Q.GEMV.problem(**gemv_args(), splits=0)


def test_gemv_shape_rules():
    Q.gemv_check_shapes(128, 8)
    for K, N, msg in [(0, 8, "K >= 1"), (129, 8, "group size"), (128, 12, "multiple of 8")]:
        with pytest.raises(ValueError, match=msg):
            Q.gemv_check_shapes(K, N)


@pytest.mark.parametrize("label", list(Q.CONVERT))
def test_convert_problem_and_plan(label):
    v = Q.CONVERT[label]
    out_dt = np.float16 if label == "v3_magic_fp16" else BF16
    wrong = BF16 if out_dt == np.float16 else np.float16
    base = {"packed": FakeDeviceArray((16,), np.int32), "out": FakeDeviceArray((128,), out_dt),
            "sink": FakeDeviceArray((1,), np.uint32)}
    (ln,) = v.launches(v.validate(*base.values()))
    assert ln.kernel == v.name and ln.grid == (1, 1, 1) and ln.args[3] == 4 and ln.args[4] == Q.CONVERT_REPS
    with pytest.raises(ValueError, match="multiple of 4 words"):
        v.validate(**dict(base, packed=FakeDeviceArray((6,), np.int32)))
    with pytest.raises(ValueError, match=r"expected shape \(128\)"):
        v.validate(**dict(base, out=FakeDeviceArray((64,), out_dt)))
    with pytest.raises(ValueError, match=f"out must be {np.dtype(out_dt).name}"):
        v.launches(v.validate(**dict(base, out=FakeDeviceArray((128,), wrong))))
    words = v.prepare(np.arange(32, dtype=np.uint8) % 16)[0]
    assert words.shape == (4,) and words.dtype == np.int32
    assert (Q.unpack_nibbles(words, 0, Q.CONVERT_ORDER[label]) == np.arange(32) % 16).all()


def test_quant_launchers_reject_bad_arguments():
    with pytest.raises(ValueError, match="dtype bfloat16"):
        Q.launch_int8_quant(FakeDeviceArray((4, 8), np.float32), FakeDeviceArray((4, 8), np.int8),
                            FakeDeviceArray((4,), np.float32))
    with pytest.raises(ValueError, match=r"expected shape \(4, 8\)"):
        Q.launch_int8_quant(FakeDeviceArray((4, 8), BF16), FakeDeviceArray((8, 4), np.int8),
                            FakeDeviceArray((4,), np.float32))
    with pytest.raises(ValueError, match=r"expected shape \(4\)"):
        Q.launch_int8_dequant(FakeDeviceArray((4, 8), np.int8), FakeDeviceArray((8,), np.float32),
                              FakeDeviceArray((4, 8), BF16))
    with pytest.raises(ValueError, match="dtype uint8"):
        Q.launch_fp8_quant(FakeDeviceArray((4, 8), BF16), FakeDeviceArray((4, 8), np.int8),
                           FakeDeviceArray((1,), np.float32), FakeDeviceArray((1,), np.uint32))
    with pytest.raises(ValueError, match=r"expected shape \(4, 8\)"):
        Q.launch_fp8_dequant(FakeDeviceArray((4, 8), np.uint8), FakeDeviceArray((1,), np.float32),
                             FakeDeviceArray((32,), BF16))


REGISTRIES = [Q.CONVERT, Q.GEMV, Q.GEMM]


@pytest.mark.parametrize("name", [v.name for r in REGISTRIES for v in r.values()])
def test_every_version_has_its_own_file_snippet_and_kernel(name):
    from utils.show import snippets
    v = next(r[name] for r in REGISTRIES if name.startswith(r.op + "_v"))
    text = v.source.path.read_text()
    assert v.snippet in snippets(text), f"{v.name}: snippet {v.snippet!r} not in {v.source.file}"
    assert f"_v{v.number}_" in v.source.file, f"{v.name}: its file {v.source.file} does not carry its number"
    others = [w for r in REGISTRIES for w in r.values() if w is not v and w.source is v.source]
    assert not others, f"{v.name} shares {v.source.file} with {[w.name for w in others]}"
    assert text.startswith("// "), f"{v.source.file} has no header comment"


def test_gemv_and_gemm_are_two_ops_with_two_numberings():
    assert Q.GEMV.op == "w4a16_gemv" and Q.GEMM.op == "w4a16_gemm"
    assert [v.number for v in Q.GEMV.values()] == list(range(7))
    assert [v.number for v in Q.GEMM.values()] == [1, 2, 3, 4]
    assert Q.BEST_GEMV in Q.GEMV and Q.BEST_GEMM in Q.GEMM


def test_every_instance_is_compiled():
    from kernels.quant import gemm, gemv
    for configs, name, src in [(gemv.GEMV_V2_CONFIGS, gemv.gemv_v2_name, gemv.GEMV_V2_SOURCE),
                               (gemv.GEMV_V3_CONFIGS, gemv.gemv_v3_name, gemv.GEMV_V3_SOURCE),
                               (gemv.GEMV_V4_CONFIGS, gemv.gemv_v4_name, gemv.GEMV_V4_SOURCE),
                               (gemv.GEMV_V5_CONFIGS, gemv.gemv_v5_name, gemv.GEMV_V5_SOURCE)]:
        assert {name(c) for c in configs} == set(src.name_expressions)
    assert all(Q.MARLIN_DEFAULT[mt] in gemm.MARLIN_CONFIGS and Q.MARLIN_DEFAULT[mt] in gemm.MARLIN_V3_CONFIGS
               for mt in (1, 2, 3, 4))


@pytest.mark.parametrize("label", list(Q.GEMV))
def test_gemv_plans_launch_every_column_with_the_default_config(label):
    v = Q.GEMV[label]
    p = gemv_problem_with_copies(1024, 1008)
    (ln,) = v.launches(p)
    cfg = v.resolve_config(p)
    cols = (16 * cfg.n16_tiles if label == "v4_mma" else cfg.columns if label in ("v2_pipelined", "v5_split")
            else Q.GEMV_COLS)
    assert ln.grid[0] * cols >= 1008 > (ln.grid[0] - 1) * cols
    assert p.out in ln.args and p.scales in ln.args and p.qzeros in ln.args


@pytest.mark.parametrize("label,needs", [("v4_mma", "qmma"), ("v6_tiled", "qtiled")])
def test_gemv_versions_on_other_layouts_say_what_they_need(label, needs):
    p = Q.GEMV.problem(*gemv_args(256, 64).values())
    assert needs in Q.GEMV[label].why_not(p)
    kw = Q.GEMV[label].prepare(np.zeros((32, 64), np.int32))
    assert list(kw) == [needs]


def test_gemv_split_plans_fill_whole_waves():
    from kernels.quant import gemv
    (ln,) = Q.GEMV["v2_pipelined"].launches(gemv_problem_with_copies(8192, 8192))
    assert ln.kernel == gemv.gemv_v2_name(gemv.GEMV_V2_DEFAULT) and ln.grid == (64, 4, 1)
    assert ln.smem == 4 * gemv.gemv_v2_stage_bytes(128)
    assert Q.GEMV["v2_pipelined"].launches(gemv_problem_with_copies(1024, 1000, splits=8),
                                           gemv.GemvV2(256, 4))[0].grid == (4, 8, 1)
    assert "at most 8" in Q.GEMV["v2_pipelined"].why_not(gemv_problem_with_copies(1024, 256, splits=9))
    (ln,) = Q.GEMV["v5_split"].launches(gemv_problem_with_copies(8192, 8192))
    assert ln.grid[0] == 8192 // 64 and ln.grid[0] * ln.grid[1] <= 132 * gemv.GEMV_V5_CTAS_PER_SM < ln.grid[0] * (ln.grid[1] + 1)
    assert Q.GEMV["v5_split"].launches(gemv_problem_with_copies(128, 40), gemv.GemvV5(32, 8))[0].grid == (2, 2, 1)
    assert "at most 2" in Q.GEMV["v5_split"].why_not(gemv_problem_with_copies(128, 40, splits=3), gemv.GemvV5(32, 8))
    ws, counters = ln.args[5], ln.args[6]
    assert ws.shape == (ln.grid[1] * 8192,) and counters.shape == (ln.grid[0],)
    assert counters.fill == 0 and not counters.every_launch           # the kernels reset their counters
    with pytest.raises(ValueError, match="not instantiated"):
        Q.GEMV["v2_pipelined"].launches(gemv_problem_with_copies(1024, 256), gemv.GemvV2(32, 4))


def test_gemv_v3_fits_two_ctas_per_sm():
    from kernels.quant import gemv
    for c in gemv.GEMV_V3_CONFIGS:
        (ln,) = Q.GEMV["v3_ring"].launches(gemv_problem_with_copies(1024, 1000), c)
        assert ln.kernel == gemv.gemv_v3_name(c) and ln.smem == c.stages * (c.rows + 1) * 256 * 16
        assert gemv.gemv_v3_ctas_per_sm(c) == 2                    # the launch bounds' occupancy
        assert gemv.gemv_v3_bytes_in_flight_per_sm(c) >= 128 * 1024


def test_gemv_v4_plan():
    from kernels.quant import gemv
    (ln,) = Q.GEMV["v4_mma"].launches(gemv_problem_with_copies(8192, 8192))
    assert ln.kernel == gemv.gemv_v4_name(gemv.GEMV_V4_DEFAULT) and ln.block == (32 * gemv.GEMV_V4_DEFAULT.warps, 1, 1)
    assert ln.grid == (8192 // 16 // gemv.GEMV_V4_DEFAULT.n16_tiles, 1, 1)
    assert Q.GEMV["v4_mma"].launches(gemv_problem_with_copies(128, 48), gemv.GemvV4(2, 8))[0].grid == (2, 1, 1)
    assert "N % 16" in Q.GEMV["v4_mma"].why_not(gemv_problem_with_copies(128, 40))


@pytest.mark.parametrize("label", list(Q.GEMM))
@pytest.mark.parametrize("override,msg", [
    ({"a": FakeDeviceArray((16, 200), BF16)}, "group size 128"),
    ({"qmma": FakeDeviceArray((4, 3, 32, 4), np.int32)}, r"expected shape \(4, 4, 32, 4\)"),
    ({"out": FakeDeviceArray((16, 64), np.float16)}, "dtype bfloat16"),
    ({"a": FakeDeviceArray((16, 256), np.float16)}, "dtype bfloat16"),
    ({"scales": FakeDeviceArray((2, 32), BF16)}, r"expected shape \(2, 64\)")])
def test_gemm_problem_rejects_bad_arguments(label, override, msg):
    with pytest.raises(ValueError, match=msg):
        Q.GEMM[label].validate(**gemm_args(**override))


@pytest.mark.parametrize("label", list(Q.GEMM))
@pytest.mark.parametrize("M", [1, 16, 37, 48, 64, 65])
def test_gemm_plans_cover_every_row_and_column(label, M):
    v = Q.GEMM[label]
    p = v.validate(*gemm_args(M, 1024, 272).values())
    limit = 48 if label == "v4_post" else 64
    if M > limit:
        assert f"M <= {limit}" in v.why_not(p)
        return
    (ln,) = v.launches(p)
    cfg = v.resolve_config(p)
    if label == "v1_mma":
        rows = 16 if M <= 16 else 32
        assert ln.grid == (-(-272 // 64), -(-M // rows), 1)
        return
    assert cfg.m16_tiles == -(-M // 16) and ln.smem == cfg.stages * Q.marlin_stage_bytes(cfg)
    tiles = -(-272 // (128 * cfg.n16_tiles))
    if label == "v3_stripe":
        assert ln.grid[0] == min(132 * Q.gemm.marlin_v3_ctas_per_sm(cfg), tiles * 8)
    else:
        assert ln.grid[0] == tiles and 1 <= ln.grid[1] <= 1024 // 128


def test_gemm_split_plans():
    v2, v4 = Q.GEMM["v2_marlin"], Q.GEMM["v4_post"]
    (ln,) = v2.launches(v2.validate(*gemm_args(16, 8192, 8192).values()))
    assert ln.kernel == "w4a16_marlin<1, 1, 4>" and ln.grid == (64, 4, 1)
    (ln,) = v2.launches(v2.validate(*gemm_args(37, 1024, 272).values(), splits=2))
    assert (ln.kernel, ln.grid) == ("w4a16_marlin<3, 1, 4>", (3, 2, 1))
    assert "at most 8" in v2.why_not(v2.validate(*gemm_args(16, 1024, 256).values(), splits=9))
    with pytest.raises(ValueError, match="not instantiated"):
        v2.launches(v2.validate(*gemm_args(16, 1024, 256).values()), Q.Marlin(1, 2, 8))
    (ln,) = v4.launches(v4.validate(*gemm_args(16, 8192, 8192).values()))
    assert (ln.kernel, ln.grid) == ("w4a16_marlin_v4_post<1, 1, 4>", (64, 4, 1))


def test_gemm_v3_plan():
    from kernels.quant import gemm
    v3 = Q.GEMM["v3_stripe"]
    p = v3.validate(*gemm_args(16, 8192, 8192).values())
    (ln,) = v3.launches(p)
    cfg = v3.resolve_config(p)
    assert ln.kernel == gemm.marlin_name(cfg, "w4a16_marlin_v3_stripe")
    assert ln.grid == (132 * gemm.marlin_v3_ctas_per_sm(cfg), 1, 1)
    assert int(ln.args[-1]) == Q.stripe_partition(64, 64, ln.grid[0])[1]
    assert v3.launches(v3.validate(*gemm_args(5, 128, 48).values()))[0].grid == (1, 1, 1)   # one unit: one CTA
    assert v3.launches(v3.validate(*gemm_args(37, 1024, 272).values(), ctas=7))[0].grid == (7, 1, 1)
    with pytest.raises(ValueError, match="ctas"):
        v3.validate(*gemm_args(16, 1024, 256).values(), ctas=0)


def test_mma_shape_rules():
    for M, K, N, msg in [(0, 128, 16, "M, K, N >= 1"), (16, 192, 16, "group size"), (16, 128, 24, "multiple of 16")]:
        with pytest.raises(ValueError, match=msg):
            Q.mma_check_shapes(M, K, N)
    with pytest.raises(ValueError, match="K % 64"):
        Q.pack_mma(np.zeros((96, 16), np.uint8))


def test_split_planning_helpers():
    from kernels.quant import gemv
    assert gemv.gemv_v2_stage_bytes(128) == 16 * 128 * 4 + 256 + 256 + 64
    assert Q.marlin_stage_bytes(Q.Marlin(1, 1, 4)) == 8192 + 4096 + 256 + 64
    assert gemv.ctas_per_sm_by_smem(50_000) == 4 and gemv.ctas_per_sm_by_smem(300_000) == 1
    assert gemv.plan_splits(64, 64, 132, 2) == 4           # 256 CTAs for 264 slots
    assert gemv.plan_splits(1, 1, 132, 2) == 1             # never more splits than groups


@pytest.mark.parametrize("path", sorted(str(p.relative_to(Q.INT8_FP8_SOURCE.path.parent))
                                        for p in Q.INT8_FP8_SOURCE.path.parent.glob("*.cu*")))
def test_qzeros_rows_are_copied_a_word_at_a_time(path):
    """A qzeros row holds N/8 int32, so row g starts 16-byte aligned only when N % 32 == 0 (not for N = 24,
    272, 1000, 1040, 4104): every cp.async of qzeros must copy 4 bytes, never 16."""
    import re
    text = (Q.INT8_FP8_SOURCE.path.parent / path).read_text()
    for call in re.findall(r"cp_async\w*\([^;]*qzeros[^;]*;", text):
        assert call.startswith("cp_async4("), f"{path}: {call}"


# --- the bit tricks, emulated ----------------------------------------------------------------------

def _bf16_halves(u):
    """(low, high) bf16 halves of uint32 words as float32."""
    u = np.asarray(u, np.uint32)
    return (u << 16).view(np.float32), (u & 0xFFFF0000).view(np.float32)


def _prmt(a, b, sel):
    """PTX prmt.b32 (default mode) / __byte_perm: byte k of the result = byte (sel >> 4k) & 7 of {b, a}."""
    src = (np.uint64(b) << np.uint64(32)) | np.uint64(a)
    out = 0
    for k in range(4):
        idx = (sel >> (4 * k)) & 7
        out |= int((src >> np.uint64(8 * idx)) & np.uint64(0xFF)) << (8 * k)
    return np.uint32(out)


def _magic_bf16(w):
    return [((w >> np.uint32(4 * j)) & np.uint32(0x000F000F)) | np.uint32(0x43004300) for j in range(4)]


def test_bf16_magic_gives_128_plus_nibble_pairs(rng):
    w = rng.integers(0, 2**32, 1000, dtype=np.uint64).astype(np.uint32)
    nib = [(w >> np.uint32(4 * i)) & np.uint32(15) for i in range(8)]
    for j, t in enumerate(_magic_bf16(w)):
        lo, hi = _bf16_halves(t)
        assert np.array_equal(lo, 128 + nib[j].astype(np.float32))
        assert np.array_equal(hi, 128 + nib[j + 4].astype(np.float32))
    # the biased zero point: 0x43004300 | z * 0x00010001 = (128 + z, 128 + z)
    for z in range(16):
        lo, hi = _bf16_halves(np.uint32(0x43004300 | z * 0x00010001))
        assert lo == hi == 128 + z


def test_fp16_magic_derivation(rng):
    w = rng.integers(0, 2**32, 1000, dtype=np.uint64).astype(np.uint32)
    nib = [(w >> np.uint32(4 * i)) & np.uint32(15) for i in range(8)]

    def halves(u):
        return (u & 0xFFFF).astype(np.uint16).view(np.float16).astype(np.float32), \
               (u >> 16).astype(np.uint16).view(np.float16).astype(np.float32)
    assert np.float16(1 / 16) == np.uint16(0x2C00).view(np.float16)
    assert np.float16(-64) == np.uint16(0xD400).view(np.float16)
    for shift, (a, b) in ((0, (0, 1)), (8, (2, 3))):
        ws = w >> np.uint32(shift)
        lo = (ws & np.uint32(0x000F000F)) | np.uint32(0x64006400)
        hi = (ws & np.uint32(0x00F000F0)) | np.uint32(0x64006400)
        l0, l1 = halves(lo)
        h0, h1 = halves(hi)
        assert np.array_equal(l0 - 1024, nib[a]) and np.array_equal(l1 - 1024, nib[a + 4])
        assert np.array_equal(h0, 1024 + 16 * nib[b].astype(np.float32))
        assert np.array_equal(h0 / 16 - 64, nib[b]) and np.array_equal(h1 / 16 - 64, nib[b + 4])


def test_prmt_restores_sequential_order(rng):
    w = np.uint32(rng.integers(0, 2**32))
    q = [(int(w) >> (4 * i)) & 15 for i in range(8)]
    raw = [int(t[0]) for t in _magic_bf16(np.array([w], np.uint32))]
    o = [_prmt(raw[0], raw[1], 0x5410), _prmt(raw[2], raw[3], 0x5410),
         _prmt(raw[0], raw[1], 0x7632), _prmt(raw[2], raw[3], 0x7632)]
    got = []
    for word in o:
        lo, hi = _bf16_halves(np.array([word], np.uint32))
        got += [int(lo[0]) - 128, int(hi[0]) - 128]
    assert got == q


def test_awq_order_makes_magic_pairs_sequential(rng):
    vals = rng.integers(0, 16, 8).astype(np.uint8)
    w = Q.pack_nibbles(vals[None, :], 1, Q.AWQ_ORDER).view(np.uint32)[0, 0]
    got = []
    for t in _magic_bf16(np.array([w], np.uint32)):
        lo, hi = _bf16_halves(t)
        got += [int(lo[0]) - 128, int(hi[0]) - 128]
    assert got == list(vals)


def test_gemv_x_pairs_match_the_lop3_pairs(rng):
    # x[0..7] as 4 bf16x2 words; xp[j] must be (x_j, x_{j+4}), the order of the weight pairs.
    x = rng.standard_normal(8).astype(BF16)
    words = x.view(np.uint16).astype(np.uint32)
    u = [int(words[2 * i] | (words[2 * i + 1] << 16)) for i in range(4)]       # xv.x, xv.y, xv.z, xv.w
    xp = [_prmt(u[0], u[2], 0x5410), _prmt(u[0], u[2], 0x7632), _prmt(u[1], u[3], 0x5410),
          _prmt(u[1], u[3], 0x7632)]
    xf = x.astype(np.float32)
    for j in range(4):
        lo, hi = _bf16_halves(np.array([xp[j]], np.uint32))
        assert lo[0] == xf[j] and hi[0] == xf[j + 4]


def _round_bf16(a):
    return np.asarray(a, np.float32).astype(BF16).astype(np.float32)


def test_gemv_v1_numerics_stay_inside_the_bf16_tolerance(rng):
    """Emulate w4a16_gemv_v1_magic's arithmetic (bf16x2 products and fma, fp32 sums) at K = 8192."""
    K, N = 8192, 64
    q = rng.integers(0, 16, (K, N)).astype(np.float64)
    z = rng.integers(0, 16, (K // Q.GROUP, N)).astype(np.float64)
    s = _round_bf16(rng.uniform(0.005, 0.02, (K // Q.GROUP, N))).astype(np.float64)
    x = _round_bf16(rng.standard_normal(K)).astype(np.float64)
    d = q - np.repeat(z, Q.GROUP, 0)                                 # exact, as hsub2 of the biased values
    rows = d.reshape(K // 8, 8, N)
    xr = x.reshape(K // 8, 8)
    p = {}
    for half in (0, 1):                                              # pair (j, j + 4): half 0 -> j, half 1 -> j + 4
        acc = _round_bf16(rows[:, 0 + 4 * half, :] * xr[:, 0 + 4 * half, None]).astype(np.float64)
        for j in range(1, 4):
            acc = _round_bf16(rows[:, j + 4 * half, :] * xr[:, j + 4 * half, None] + acc).astype(np.float64)
        p[half] = acc
    per_row = (p[0] + p[1]).astype(np.float32)                       # fp32 from here on
    per_group = per_row.reshape(K // Q.GROUP, Q.GROUP // 8, N).sum(axis=1)
    out = _round_bf16((per_group * s).sum(axis=0))
    ref = x @ (d * np.repeat(s, Q.GROUP, 0))
    rel = np.linalg.norm(out - ref) / np.linalg.norm(ref)
    assert rel < 0.5e-2, rel                                         # half the bf16 tolerance (1e-2)


# --- the tensor-core GEMM's fragment shuffle ---------------------------------------------------------

def _unshuffle_like_the_kernel(qmma, K, N):
    """Rebuild W's codes from qmma the way w4a16_mma reads them: word j of lane (g, t) in (nt, kc) is
    k16 tile 4 kc + j; lop3 pair (i, i+4) = (low, high) half of register b[i]; b[0], b[1] are b0, b1 of the
    n8 tile at column 16 nt + g, b[2], b[3] those at 16 nt + 8 + g; PTX: b0 = B[2t, 2t+1][g], b1 = B[2t+8, 2t+9][g]."""
    W = -np.ones((K, N), np.int64)
    words = qmma.view(np.uint32)
    for nt in range(N // 16):
        for kc in range(K // 64):
            for lane in range(32):
                g, t = lane // 4, lane % 4
                for j in range(4):
                    w = int(words[nt, kc, lane, j])
                    nib = [(w >> (4 * i)) & 15 for i in range(8)]
                    k0, n0 = (4 * kc + j) * 16, nt * 16
                    for reg, (col, krow) in enumerate([(g, 2 * t), (g, 2 * t + 8), (g + 8, 2 * t), (g + 8, 2 * t + 8)]):
                        W[k0 + krow, n0 + col] = nib[reg]          # low half of b[reg]
                        W[k0 + krow + 1, n0 + col] = nib[reg + 4]  # high half
    return W


@pytest.mark.parametrize("K,N", [(128, 16), (256, 48)])
def test_mma_shuffle_matches_the_fragment_layout(rng, K, N):
    q = rng.integers(0, 16, (K, N)).astype(np.uint8)
    qmma = Q.pack_mma(q)
    assert qmma.shape == (N // 16, K // 64, 32, 4) and qmma.dtype == np.int32 and qmma.flags.c_contiguous
    assert np.array_equal(_unshuffle_like_the_kernel(qmma, K, N), q)


def test_mma_zero_indexing_matches_gptq_qzeros(rng):
    # the kernel reads z of column 16 n16 + g from qzeros[grp, 2 n16] nibble g, and of 16 n16 + 8 + g from
    # qzeros[grp, 2 n16 + 1] nibble g
    z = rng.integers(0, 16, (3, 64)).astype(np.uint8)
    qz = Q.pack_nibbles(z, 1).view(np.uint32)
    for grp in range(3):
        for n16 in range(4):
            for g in range(8):
                assert (int(qz[grp, 2 * n16]) >> (4 * g)) & 15 == z[grp, 16 * n16 + g]
                assert (int(qz[grp, 2 * n16 + 1]) >> (4 * g)) & 15 == z[grp, 16 * n16 + 8 + g]


# --- line-by-line ports of the GEMV and GEMM index arithmetic (exact integer math, no rounding) -------

def _port_gemv(qweight, qzeros, scales, x, K, N):
    """w4a16_gemv_v0's indexing in Python: grid, lanes, K-slices, groups, rows, nibbles, reduction."""
    qw = qweight.view(np.uint32).reshape(-1)             # as the kernel's flat uint4 array, 4 words each
    qz = qzeros.view(np.uint32).reshape(-1)
    sc = scales.reshape(-1)
    out = np.full(N, np.nan)
    for bx in range((N + 31) // 32):
        red = np.zeros((32, 33))
        for tid in range(256):
            lane_c, ks = tid & 7, tid >> 3
            n = bx * 32 + lane_c * 4
            acc = np.zeros(4)
            if n < N:
                for g in range(ks, K // 128, 32):
                    zw = int(qz[g * (N // 8) + (n >> 3)]) >> ((n & 7) * 4)
                    z = [(zw >> (4 * c)) & 15 for c in range(4)]
                    gacc = np.zeros(4)
                    for half in range(2):
                        r0 = g * 16 + half * 8
                        for r in range(8):
                            u4 = (r0 + r) * (N // 4) + (n >> 2)            # uint4 index
                            words = qw[4 * u4:4 * u4 + 4]
                            xs = x[8 * (r0 + r):8 * (r0 + r) + 8]
                            for c in range(4):
                                for i in range(8):
                                    gacc[c] += (((int(words[c]) >> (4 * i)) & 15) - z[c]) * xs[i]
                    for c in range(4):
                        acc[c] += gacc[c] * sc[g * N + n + c]
            for c in range(4):
                red[ks, lane_c * 4 + c] = acc[c]
        for tid in range(32):
            col = bx * 32 + tid
            if col < N:
                out[col] = red[:, tid].sum()
    return out


def test_gemv_index_arithmetic_port(rng):
    K, N = 384, 40
    q = rng.integers(0, 16, (K, N)).astype(np.uint8)
    z = rng.integers(0, 16, (K // 128, N)).astype(np.uint8)
    s = rng.integers(1, 4, (K // 128, N)).astype(np.float64)
    x = rng.integers(-3, 4, K).astype(np.float64)
    qw, qz = Q.pack_gptq(q, z)
    ref = x @ ((q - np.repeat(z, 128, 0).astype(np.float64)) * np.repeat(s, 128, 0))
    assert np.array_equal(_port_gemv(qw, qz, s, x, K, N), ref)


def _mma(a_regs, b_regs, d_regs):
    """One warp's mma.m16n8k16 on fragments held as values: a_regs[lane] = 4 pairs, b_regs[lane] = 2 pairs,
    d_regs[lane] = 4 floats (updated in place), with the PTX fragment layout."""
    A = np.zeros((16, 16))
    B = np.zeros((16, 8))
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for reg, (row, col) in enumerate([(g, 2 * t), (g + 8, 2 * t), (g, 2 * t + 8), (g + 8, 2 * t + 8)]):
            A[row, col], A[row, col + 1] = a_regs[lane][reg]
        for reg, krow in enumerate([2 * t, 2 * t + 8]):
            B[krow, g], B[krow + 1, g] = b_regs[lane][reg]
    D = A @ B
    for lane in range(32):
        g, t = lane // 4, lane % 4
        d = d_regs[lane]
        d[0] += D[g, 2 * t]
        d[1] += D[g, 2 * t + 1]
        d[2] += D[g + 8, 2 * t]
        d[3] += D[g + 8, 2 * t + 1]


def _port_mma(qmma, qzeros, scales, A, M, K, N):
    """w4a16_mma_body's indexing in Python (exact integer math): blocks, warps, chunks, fragments, smem sum."""
    (ln,) = Q.gemm.plan_gemm_v1(Q.gemm.GemmProblem(M, K, N, *[None] * 5))
    kernel, (gx, gy, _) = ln.kernel, ln.grid
    MT = 1 if kernel.endswith("m16") else 2
    words_flat = qmma.view(np.uint32).reshape(-1)
    qz = qzeros.view(np.uint32).reshape(-1)
    sc = scales.reshape(-1)
    Af = A.reshape(-1)
    C = np.full((M, N), np.nan)
    ntiles, kchunks, groups = N // 16, K // 64, K // 128
    for by in range(gy):
        for bx in range(gx):
            nt0, m0 = bx * 4, by * 16 * MT
            red = np.zeros((MT * 16, 64))
            for warp in range(8):
                acc = [[[[np.zeros(4) for _ in range(32)] for _ in range(2)] for _ in range(4)] for _ in range(MT)]
                for grp in range(warp, groups, 8):
                    sb, zb = {}, {}
                    for lane in range(32):
                        g = lane >> 2
                        for nt in range(4):
                            n16 = min(nt0 + nt, ntiles - 1)
                            ca = n16 * 16 + g
                            sb[lane, nt] = (sc[grp * N + ca], sc[grp * N + ca + 8])
                            zw0, zw1 = int(qz[grp * (N // 8) + 2 * n16]), int(qz[grp * (N // 8) + 2 * n16 + 1])
                            zb[lane, nt] = (128 + ((zw0 >> (4 * g)) & 15), 128 + ((zw1 >> (4 * g)) & 15))
                    for half in range(2):
                        kc = 2 * grp + half
                        for j in range(4):
                            k0 = kc * 64 + j * 16
                            a = {}
                            for lane in range(32):
                                g, t = lane >> 2, lane & 3
                                for mt in range(MT):
                                    r0 = m0 + mt * 16 + g
                                    r1 = r0 + 8
                                    base0 = min(r0, M - 1) * K + k0 + 2 * t
                                    base1 = min(r1, M - 1) * K + k0 + 2 * t
                                    pair = lambda base, ok, off: (Af[base + off], Af[base + off + 1]) if ok else (0, 0)
                                    a[lane, mt] = [pair(base0, r0 < M, 0), pair(base1, r1 < M, 0),
                                                   pair(base0, r0 < M, 8), pair(base1, r1 < M, 8)]
                            for nt in range(4):
                                bregs = {0: [], 1: []}
                                for lane in range(32):
                                    if nt0 + nt < ntiles:
                                        w = int(words_flat[(((nt0 + nt) * kchunks + kc) * 32 + lane) * 4 + j])
                                    else:
                                        w = 0
                                    b = [((w >> (4 * i)) & 15) + 128 for i in range(8)]   # b[i] low, b[i+4] high
                                    za, zc = zb[lane, nt]
                                    sa, scc = sb[lane, nt]
                                    bregs[0].append([((b[0] - za) * sa, (b[4] - za) * sa), ((b[1] - za) * sa, (b[5] - za) * sa)])
                                    bregs[1].append([((b[2] - zc) * scc, (b[6] - zc) * scc), ((b[3] - zc) * scc, (b[7] - zc) * scc)])
                                for mt in range(MT):
                                    for h in range(2):
                                        _mma([a[lane, mt] for lane in range(32)], bregs[h], acc[mt][nt][h])
                for lane in range(32):
                    g, t = lane >> 2, lane & 3
                    for mt in range(MT):
                        for nt in range(4):
                            for h in range(2):
                                col, row = nt * 16 + h * 8 + 2 * t, mt * 16 + g
                                d = acc[mt][nt][h][lane]
                                red[row, col] += d[0]
                                red[row, col + 1] += d[1]
                                red[row + 8, col] += d[2]
                                red[row + 8, col + 1] += d[3]
            for i in range(MT * 16 * 64):
                row, col = i // 64, i % 64
                m, n = m0 + row, nt0 * 16 + col
                if m < M and n < N:
                    C[m, n] = red[row, col]
    return C


@pytest.mark.parametrize("M", [5, 37])
def test_mma_index_arithmetic_port(rng, M):
    K, N = 256, 80
    q = rng.integers(0, 16, (K, N)).astype(np.uint8)
    z = rng.integers(0, 16, (K // 128, N)).astype(np.uint8)
    s = rng.integers(1, 4, (K // 128, N)).astype(np.float64)
    A = rng.integers(-3, 4, (M, K)).astype(np.float64)
    _, qz = Q.pack_gptq(q, z)
    ref = A @ ((q - np.repeat(z, 128, 0).astype(np.float64)) * np.repeat(s, 128, 0))
    assert np.array_equal(_port_mma(Q.pack_mma(q), qz, s, A, M, K, N), ref)


def _port_marlin(a, qmma, qzeros, scales, M, K, N, mt, ntw, splits, post=False):
    """w4a16_marlin's indexing in Python, exact arithmetic: cp.async stage layout (weights, XOR-swizzled A,
    scales, zero words with partial chunks), ldmatrix addressing, the B/A/D fragment layouts of
    mma.m16n8k16, the epilogue and the split-K sum. ``post``: w4a16_marlin_v4_post's stage instead (B = the
    biased codes 128 + q, row sums of A by an mma against ones, zero point and scale per group on the
    lane's D columns). Returns float64 [M, N]."""
    qm = qmma.view(np.uint32).reshape(-1, 4)                       # uint4 index -> 4 words
    a16 = a.view(np.uint16).reshape(-1)
    sc = scales.astype(np.float64).reshape(-1)
    qz = qzeros.view(np.uint32).reshape(-1)
    NT_CTA, BN = 8 * ntw, 128 * ntw
    ntiles, kchunks, groups = N // 16, K // 64, K // 128
    ws = np.full((splits, M, N), np.nan)
    out = np.full((M, N), np.nan)
    bf = lambda u: float(np.array([u << 16], np.uint32).view(np.float32)[0])
    for bx in range(-(-N // BN)):
        nt0 = bx * NT_CTA
        for split in range(splits):
            acc = np.zeros((8, mt, ntw, 2, 32, 4))                # [warp, ...] registers
            g_begin = split * groups // splits
            for gi in range(g_begin, (split + 1) * groups // splits):
                # the stage as the cp.async loops fill it
                sw = np.zeros((NT_CTA * 64, 4), np.uint32)
                for i in range(NT_CTA * 64):
                    tile = nt0 + i // 64
                    if tile < ntiles:
                        sw[i] = qm[(tile * kchunks + 2 * gi) * 32 + i % 64]
                sa = np.zeros((16 * mt, 16, 8), np.uint16)           # [row][physical chunk][8 bf16]
                for i in range(16 * mt * 16):
                    r, c = i // 16, i % 16
                    if r < M:
                        sa[r, c ^ (r & 7)] = a16[r * K + gi * 128 + 8 * c:r * K + gi * 128 + 8 * c + 8]
                ss = np.zeros(BN)
                for c in range(BN // 8):
                    col = nt0 * 16 + 8 * c
                    if col < N:
                        ss[8 * c:8 * c + 8] = sc[gi * N + col:gi * N + col + 8]
                sz = np.zeros(BN // 8, np.uint32)
                for c in range(BN // 8):                     # one 4-byte cp.async per word (rows are only
                    word = nt0 * 2 + c                       # 4-byte aligned unless N % 32 == 0)
                    if word < N // 8:
                        sz[c] = qz[gi * (N // 8) + word]
                part = np.zeros((8, mt, ntw, 2, 32, 4))             # v4: this group's sum A (128 + q)
                rsum = np.zeros((mt, 32, 4))                        # v4: the ones-mma's D (row sums of A)
                for warp in range(8):
                    for ks in range(8):
                        half, kk = ks // 4, ks % 4
                        # A fragments: lane L addresses row mt*16 + L%16, chunk 2ks + L/16; lane (g, t) gets
                        # register i = matrix i [g][2t, 2t+1], matrix i addressed by lanes 8i .. 8i+7
                        afr = np.zeros((mt, 32, 4, 2))
                        for m in range(mt):
                            for lane in range(32):
                                g, t = lane // 4, lane % 4
                                for i in range(4):
                                    src = 8 * i + g
                                    r, c = m * 16 + (src & 15), 2 * ks + (src >> 4)
                                    chunk = sa[r, c ^ (r & 7)]
                                    afr[m, lane, i] = [bf(int(chunk[2 * t])), bf(int(chunk[2 * t + 1]))]
                        for j in range(ntw):
                            ntl = warp * ntw + j
                            bfr = np.zeros((32, 4, 2))
                            for lane in range(32):
                                g, t = lane // 4, lane % 4
                                w = int(sw[(ntl * 2 + half) * 32 + lane][kk])
                                for i in range(4):                   # b[i] = nibbles (i, i + 4), column g or g+8
                                    col_l = 16 * ntl + g + 8 * (i >> 1)
                                    z = -128 if post else (int(sz[col_l // 8]) >> (4 * (col_l % 8))) & 15
                                    bfr[lane, i] = [((w >> (4 * i)) & 15) - z, ((w >> (4 * i + 16)) & 15) - z]
                                    bfr[lane, i] *= 1.0 if post else ss[col_l]
                            for m in range(mt):
                                for h in range(2):                   # n8 tile h: B regs b[2h], b[2h+1]
                                    A = np.zeros((16, 16))
                                    B = np.zeros((16, 8))
                                    for lane in range(32):
                                        g, t = lane // 4, lane % 4
                                        A[g, 2 * t:2 * t + 2] = afr[m, lane, 0]
                                        A[g + 8, 2 * t:2 * t + 2] = afr[m, lane, 1]
                                        A[g, 2 * t + 8:2 * t + 10] = afr[m, lane, 2]
                                        A[g + 8, 2 * t + 8:2 * t + 10] = afr[m, lane, 3]
                                        B[2 * t:2 * t + 2, g] = bfr[lane, 2 * h]
                                        B[2 * t + 8:2 * t + 10, g] = bfr[lane, 2 * h + 1]
                                    D = A @ B
                                    R = A @ np.ones((16, 8))
                                    for lane in range(32):
                                        g, t = lane // 4, lane % 4
                                        frag = [D[g, 2 * t], D[g, 2 * t + 1], D[g + 8, 2 * t], D[g + 8, 2 * t + 1]]
                                        (part if post else acc)[warp, m, j, h, lane] += frag
                                        if warp == j == h == 0:
                                            rsum[m, lane] += [R[g, 2 * t], R[g, 2 * t + 1], R[g + 8, 2 * t],
                                                              R[g + 8, 2 * t + 1]]
                    if post:                                 # per group: the lane's columns 8h + 2t + e
                        for j in range(ntw):
                            ntl = warp * ntw + j
                            for h in range(2):
                                for lane in range(32):
                                    t = lane % 4
                                    for e in range(2):
                                        col_l = 16 * ntl + 8 * h + 2 * t + e
                                        zb = 128 + ((int(sz[2 * ntl + h]) >> (8 * t + 4 * e)) & 15)
                                        for m in range(mt):
                                            for p in range(2):
                                                i = 2 * p + e
                                                acc[warp, m, j, h, lane, i] += ss[col_l] * (
                                                    part[warp, m, j, h, lane, i] - zb * rsum[m, lane, i])
            for warp in range(8):
                for m in range(mt):
                    for j in range(ntw):
                        for h in range(2):
                            for lane in range(32):
                                g, t = lane // 4, lane % 4
                                col = (nt0 + warp * ntw + j) * 16 + h * 8 + 2 * t
                                for p in range(2):
                                    row = m * 16 + g + 8 * p
                                    if col < N and row < M:
                                        ws[split, row, col:col + 2] = acc[warp, m, j, h, lane, 2 * p:2 * p + 2]
        cols = slice(bx * BN, min(N, (bx + 1) * BN))
        out[:, cols] = ws[:, :, cols].sum(axis=0)
    return out


@pytest.mark.parametrize("post", [False, True], ids=["v2", "v4_post"])
@pytest.mark.parametrize("M,K,N,ntw,splits", [(5, 256, 48, 1, 2), (20, 128, 272, 2, 1)])
def test_marlin_index_arithmetic_port(rng, M, K, N, ntw, splits, post):
    q = rng.integers(0, 16, (K, N)).astype(np.uint8)
    z = rng.integers(0, 16, (K // 128, N)).astype(np.uint8)
    s = rng.uniform(0.5, 2, (K // 128, N)).astype(BF16)
    a = rng.integers(-8, 8, (M, K)).astype(BF16)                   # small integers: every product exact
    qmma, qzeros = Q.pack_mma(q), Q.pack_gptq(q, z)[1]
    got = _port_marlin(a, qmma, qzeros, s, M, K, N, -(-M // 16), ntw, splits, post)
    ref = a.astype(np.float64) @ Q.dequantize_int4(q, s.astype(np.float64), z).astype(np.float64)
    assert np.allclose(got, ref, rtol=1e-12, atol=1e-9)


# --- SASS readers (the notebook applies them to utils.build.sass on a GPU host) ---------------------

_SASS = """
        /*0070*/                   HFMA2.MMA R15, -RZ, RZ, 0, 0 ;
        /*03b0*/                   LDG.E.128.CONSTANT R36, desc[UR4][R36.64] ;
        /*03d0*/                   LDG.E.EF.128 R40, desc[UR4][R28.64] ;
        /*0410*/               @P0 LDG.E.EF.128 R48, desc[UR4][R52.64] ;
        /*0790*/                   HFMA2.MMA.BF16_V2 R82, R82, 1, 1, -R55 ;
        /*0880*/                   LDG.E.EF.128 R40, desc[UR4][R66.64] ;
        /*5c50*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*78f0*/                   HMMA.16816.F32.BF16 R32, R20.reuse, R26, R32 ;
        /*7900*/                   HMMA.16816.F32.BF16 R16, R20, R24, R16 ;
        /*7910*/                   EXIT ;
"""


def test_sass_readers():
    assert Q.sass_weight_loads_before_math(_SASS) == 2      # the register-move HFMA2.MMA does not count as math
    assert Q.sass_stage_instructions(_SASS) == 3
    with pytest.raises(ValueError, match="BAR.SYNC"):
        Q.sass_stage_instructions("        /*0000*/   EXIT ;")


# --- the striped partition of GEMM v3

def _stripe_owner(u, U, P):
    return ((u + 1) * P - 1) // U


@pytest.mark.parametrize("tiles,groups,ctas", [(64, 64, 396), (1, 1, 396), (3, 8, 5), (7, 3, 20), (2, 9, 2),
                                               (64, 64, 264), (17, 65, 396)])
def test_stripe_partition_covers_every_unit_once(tiles, groups, ctas):
    """The kernel's partition, replayed: every (tile, group) unit belongs to exactly one CTA, a tile's
    contributors are the consecutive CTAs c_first .. c_last, every rank fits max_contrib, and each CTA's
    segments (one flush per tile it touches) tile its unit range."""
    P, max_contrib = Q.stripe_partition(tiles, groups, ctas)
    U = tiles * groups
    assert P == min(ctas, U)
    seen = np.zeros(U, int)
    ranks = {}
    for c in range(P):
        u0, u1 = c * U // P, (c + 1) * U // P
        assert u1 > u0                                             # every CTA has work
        T, grp, seg_begin = u0 // groups, u0 % groups, u0 % groups
        for i in range(u1 - u0):                                   # the kernel's incremental (T, grp)
            assert (T, grp) == divmod(u0 + i, groups)
            seen[u0 + i] += 1
            assert _stripe_owner(u0 + i, U, P) == c
            if grp != groups - 1 and i != u1 - u0 - 1:
                grp += 1
                continue
            c_first = _stripe_owner(T * groups, U, P)
            c_last = _stripe_owner(T * groups + groups - 1, U, P)
            whole = seg_begin == 0 and grp == groups - 1
            assert whole == (c_first == c_last)
            assert 0 <= c - c_first < max_contrib and c_first <= c <= c_last
            ranks.setdefault(T, []).append((c - c_first, seg_begin, grp))
            seg_begin = grp = 0
            T += 1
    assert (seen == 1).all()
    for T, segs in ranks.items():                                  # ranks 0.. in order, groups contiguous
        assert [r for r, _, _ in segs] == list(range(len(segs)))
        assert segs[0][1] == 0 and segs[-1][2] == groups - 1
        assert all(segs[i][2] + 1 == segs[i + 1][1] for i in range(len(segs) - 1))


def test_random_int4_problem_on_numpy():
    q, z, s = Q.random_int4_problem(256, 24, xp=np)
    assert q.shape == (256, 24) and q.dtype == np.uint8 and q.max() <= 15
    assert z.shape == (2, 24) and z.dtype == np.uint8 and z.max() <= 15
    assert s.shape == (2, 24) and s.dtype == BF16
    assert 0.004 <= float(s.astype(np.float32).min()) and float(s.astype(np.float32).max()) <= 0.021
    with pytest.raises(ValueError, match="group size"):
        Q.random_int4_problem(200, 8, xp=np)


@pytest.mark.parametrize("K,N", [(128, 40), (256, 64), (1024, 8)])
def test_gemv_tiled_pack_puts_each_tile_rows_back_to_back(rng, K, N):
    qweight = rng.integers(-2**31, 2**31, (K // 8, N)).astype(np.int32)
    t = Q.pack_gemv_tiled(qweight)
    assert t.shape == (-(-N // Q.GEMV_COLS), K // 8, Q.GEMV_COLS) and t.flags.c_contiguous
    for n in (0, N // 2, N - 1):
        assert (t[n // Q.GEMV_COLS, :, n % Q.GEMV_COLS] == qweight[:, n]).all()
    pad = t.shape[0] * Q.GEMV_COLS - N
    if pad:
        assert (t[-1, :, Q.GEMV_COLS - pad:] == 0).all()
    with pytest.raises(ValueError, match="int32"):
        Q.pack_gemv_tiled(qweight.astype(np.int64))



# --- the chapter's two pictures are drawn from the kernels' own definitions ----------------------------

def test_bf16_magic_picture_encodes_128_plus_q():
    from kernels.quant import figures as F
    assert F.bf16_fields(F.MAGIC_BF16) == (0, 134, 0) and F.bf16_value(F.MAGIC_BF16) == 128.0
    for q in range(16):
        assert F.bf16_value(F.MAGIC_BF16 | q) == 128 + q
    with pytest.raises(ValueError, match="16-bit"):
        F.bf16_fields(1 << 16)


@pytest.mark.parametrize("lane", [0, 5, 31])
def test_fragment_picture_pairs_nibbles_i_and_i_plus_4_in_one_column(lane):
    from kernels.quant import figures as F
    grid = F.fragment_owner_grid(lane)
    g, t = lane // 4, lane % 4
    assert sorted(grid[grid >= 0].tolist()) == list(range(8))
    for i in range(4):
        (k0, n0), (k1, n1) = (np.argwhere(grid == i)[0], np.argwhere(grid == i + 4)[0])
        assert n0 == n1 and k1 == k0 + 1 and k0 in (2 * t, 2 * t + 8) and n0 in (g, g + 8)


def test_figures_draw(tmp_path):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from kernels.quant import figures as F
    fig, axes = plt.subplots(1, 2)
    F.draw_bf16_magic(axes[0])
    F.draw_fragment_order(axes[1])
    fig.savefig(tmp_path / "f.png")
    plt.close(fig)


# --- the chapter's ladders ---------------------------------------------------------------------------

@pytest.mark.parametrize("K,N", [(128, 16), (256, 48)])
def test_mma_codes_undoes_pack_mma(rng, K, N):
    from kernels.quant.ladders import mma_codes
    q = rng.integers(0, 16, (K, N)).astype(np.uint8)
    assert (mma_codes(Q.pack_mma(q)) == q).all(), f"seed {SEED}"


def test_ladders_are_built_on_the_registries():
    from kernels.quant import ladders
    g = ladders.gemv_ladder(rec=None, shapes=[(1, 8192, 8192)])
    m = ladders.gemm_ladder(rec=None, shapes=[(16, 8192, 8192)], tinygemm=False)
    assert g.registry is Q.GEMV and m.registry is Q.GEMM and g.ceiling == m.ceiling == "same_bytes"
    assert list(g.peers) == ["cublas_bf16", "torch_int4pack_mm"] and list(m.peers) == ["cublas_bf16"]
    assert g.cost((1, 8192, 8192), "bfloat16")["nbytes"] == Q.gemv_nbytes(8192, 8192)
    assert m.cost((16, 8192, 8192), "bfloat16")["nbytes"] == Q.gemm_nbytes(16, 8192, 8192)
    assert all(s[0] == 1 for s in ladders.GEMV_ODD) and max(s[0] for s in ladders.GEMM_ODD) == 64
    assert any(s[2] % 16 == 0 for s in ladders.GEMV_ODD), "v4 needs one odd shape with N % 16 == 0"
