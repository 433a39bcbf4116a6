"""Chapter 9 kernels on fresh random data with poisoned outputs: INT8 and FP8 quantize/dequantize
(bit-exact against the references), INT4 conversions (exact), the W4A16 GEMVs and GEMMs (bf16
tolerance), shapes that are not multiples of the tiles included; every instantiated tile/stage
variant and several split-K factors of the pipelined kernels."""
import numpy as np
import pytest

pytestmark = pytest.mark.gpu


def _bf16_normal(shape):
    import cupy
    from kernels import quant as Q
    return cupy.random.standard_normal(shape, dtype=cupy.float32).astype(Q.BF16)


def _int4_problem(K, N):
    """Random INT4 codes q [K, N], zero points z [K/128, N] and bf16 group scales s [K/128, N]."""
    from kernels import quant as Q
    return Q.random_int4_problem(K, N)


def _gemv_problem(K, N):
    """(x, qweight, qzeros, s, ref, q): a random batch-1 W4A16 problem in the GPTQ layout, x bf16 [1, K], and the
    fp32 reference the GEMV versions are checked against (q: the codes, for layouts repacked from them)."""
    from kernels import quant as Q
    q, z, s = _int4_problem(K, N)
    x = _bf16_normal((1, K))
    qweight, qzeros = Q.pack_gptq(q, z)
    return x, qweight, qzeros, s, Q.gemv_reference(x, qweight, qzeros, s), q


def _mma_problem(K, N):
    """(qzeros, qmma, s, W): the tensors the Marlin-style kernels take, and W [K, N] fp32 holding exactly
    the bf16 values their B fragments hold (the reference multiplies by it)."""
    import cupy
    from kernels import quant as Q
    q, z, s = _int4_problem(K, N)
    _, qzeros = Q.pack_gptq(q, z)
    return qzeros, Q.pack_mma(q), s, Q.dequantize_int4(q, s, z).astype(Q.BF16).astype(cupy.float32)


# M: 1, odd, exactly 16/32/48/64 and in between (37)
MARLIN_MS = (1, 5, 16, 17, 32, 37, 48, 64)


def _marlin_cases(K, W, configs):
    """(M, a, ref, ntw, stages) for every M of MARLIN_MS and every instance of ``configs`` for its m16 count."""
    import cupy
    for M in MARLIN_MS:
        a = _bf16_normal((M, K))
        ref = a.astype(cupy.float32) @ W
        for _, ntw, stages in [c for c in configs if c[0] == -(-M // 16)]:
            yield M, a, ref, ntw, stages


@pytest.mark.parametrize("shape", [(37, 1000), (37, 999), (1, 8), (5, 1), (256, 4096)])
def test_int8_quant_and_dequant(shape):
    import cupy
    from kernels import quant as Q
    from utils.check import assert_close, poisoned
    w = _bf16_normal(shape)
    q, scale = poisoned(shape, np.int8), poisoned((shape[0],), np.float32)
    Q.launch_int8_quant(w, q, scale)
    q_ref, s_ref = Q.int8_reference(w)
    assert_close(scale, s_ref, dtype="exact", name=f"int8 scale {shape}")
    assert_close(q, q_ref, dtype="exact", name=f"int8 q {shape}")
    back = poisoned(shape, Q.BF16)
    Q.launch_int8_dequant(q, scale, back)
    assert_close(back, Q.int8_dequant_reference(q_ref, s_ref), dtype="bfloat16", name=f"int8 dequant {shape}")
    assert float(cupy.abs(back.astype(cupy.float32) - w.astype(cupy.float32)).max()) <= float(scale.max())


@pytest.mark.parametrize("shape", [(1823, 781), (7,), (64, 128), (3, 5, 9)])
def test_fp8_quant_and_dequant(shape):
    import cupy
    from kernels import quant as Q
    from utils.check import assert_close, poisoned
    x = _bf16_normal(shape)
    q, scale = poisoned(shape, np.uint8), poisoned((1,), np.float32)
    amax = cupy.empty(1, dtype=cupy.uint32)
    Q.launch_fp8_quant(x, q, scale, amax)
    q_ref, s_ref = Q.fp8_reference(x)
    assert float(scale[0]) == float(s_ref)
    assert_close(q, q_ref, dtype="exact", name=f"fp8 q {shape}")
    back = poisoned(shape, Q.BF16)
    Q.launch_fp8_dequant(q, scale, back)
    assert_close(back, Q.fp8_decode(q_ref) * s_ref, dtype="bfloat16", name=f"fp8 dequant {shape}")
    assert_close(back, x.astype(cupy.float32), tol=0.05, name=f"fp8 round trip {shape}")


@pytest.mark.parametrize("words", [4, 4 * 777, 4 * 65536])
def test_int4_conversions_are_exact(words):
    import cupy
    from kernels import quant as Q
    from utils.check import assert_close, poisoned
    vals = cupy.random.randint(0, 16, words * 8, dtype=cupy.int32).astype(cupy.uint8)
    sink = cupy.zeros(1, dtype=cupy.uint32)
    for label, v in Q.CONVERT_VERSIONS.items():
        packed = Q.pack_nibbles(vals, 0, Q.CONVERT_ORDER[label])
        dt = np.float16 if "fp16" in label else Q.BF16
        out = poisoned((words * 8,), dt)
        v.launch(packed, out, sink, reps=3)
        assert_close(out, vals.astype(cupy.float32), dtype="exact", name=f"{label} ({words} words)")


# (128, 40), not (128, 8): with one group and only 8 outputs, v1's bf16 partial sums exceed the bf16
# tolerance in about 1 run in 200 (a NumPy emulation of its arithmetic, 10^5 draws); 40 outputs keep the
# single group and the partly filled 32-column block, and stay under 0.008 in 3 x 10^4 draws.
@pytest.mark.parametrize("K,N", [(128, 40), (384, 1000), (1024, 24), (4096, 4104), (8192, 8192)])
def test_gemv_versions_match_the_reference(K, N):
    from kernels import quant as Q
    from utils.check import assert_close, poisoned
    x, qweight, qzeros, s, ref, q = _gemv_problem(K, N)
    for label, v in Q.GEMV_VERSIONS.items():
        out = poisoned((1, N), Q.BF16)
        v.launch(x, qweight, qzeros, s, out)
        assert_close(out, ref, dtype="bfloat16", name=f"{label} K={K} N={N}")


def test_gemv_rejects_partial_groups_on_the_device():
    import cupy
    from kernels import quant as Q
    x = _bf16_normal((1, 200))
    with pytest.raises(ValueError, match="group size 128"):
        Q.GEMV_VERSIONS[Q.BEST_GEMV].launch(x, cupy.zeros((25, 64), cupy.int32), cupy.zeros((1, 8), cupy.int32),
                                             cupy.zeros((1, 64), Q.BF16), cupy.zeros((1, 64), Q.BF16))


# 1152 = 9 groups: warp 0 runs a second round (groups 0 and 8) while the others run one, which exercises
# the register prefetch across rounds with a remainder.
@pytest.mark.parametrize("K,N", [(128, 16), (384, 80), (1152, 48), (8192, 8192)])
def test_mma_gemm_matches_the_reference(K, N):
    import cupy
    from kernels import quant as Q
    from utils.check import assert_close, poisoned
    q, z, s = _int4_problem(K, N)
    _, qzeros = Q.pack_gptq(q, z)
    qmma = Q.pack_mma(q)
    W = Q.dequantize_int4(q, s, z).astype(Q.BF16).astype(cupy.float32)   # what the kernel's B fragments hold
    for M in (1, 5, 16, 32, 37, 64):
        a = _bf16_normal((M, K))
        out = poisoned((M, N), Q.BF16)
        Q.launch_mma(a, qmma, qzeros, s, out)
        assert_close(out, a.astype(cupy.float32) @ W, dtype="bfloat16", name=f"w4a16 mma M={M} K={K} N={N}")


# N = 40, 1000, 4104: partial BN tiles (and a partial 16-byte chunk of qzeros); K = 128: one group,
# so every split count but 1 is rejected; 1152 = 9 groups: uneven splits.
@pytest.mark.parametrize("K,N", [(128, 40), (1152, 1000), (4096, 4104), (8192, 8192)])
def test_gemv_v2_variants_and_splits(K, N):
    from kernels import quant as Q
    from utils.check import assert_close, poisoned
    x, qweight, qzeros, s, ref, q = _gemv_problem(K, N)
    groups = K // Q.GROUP
    for bn, stages in Q.GEMV_V2_CONFIGS:
        for splits in sorted({None, 1, min(3, groups), groups}, key=lambda v: -1 if v is None else v):
            out = poisoned((1, N), Q.BF16)
            Q.launch_gemv_v2(x, qweight, qzeros, s, out, bn=bn, stages=stages, splits=splits)
            assert_close(out, ref, dtype="bfloat16", name=f"gemv v2 BN={bn} stages={stages} splits={splits} K={K} N={N}")
    with pytest.raises(ValueError, match="splits"):
        Q.launch_gemv_v2(x, qweight, qzeros, s, poisoned((1, N), Q.BF16), splits=groups + 1)


# v3: every (rows, stages) instance. K = 1152: 9 groups, so K-slices 9..31 own no group (empty ring);
# 4224 = 33 groups: slice 0 owns two, the others one; 16384 = 128 groups: 4 per slice, the ring wraps
# several times (8 or 16 stages through 3 or 5 slots). N = 40, 1000, 4104: partial 32-column blocks and
# qzeros rows that are not 16-byte aligned.
@pytest.mark.parametrize("K,N", [(128, 40), (1152, 1000), (4224, 4104), (16384, 264), (8192, 8192)])
def test_gemv_v3_ring_variants(K, N):
    from kernels import quant as Q
    from utils.check import assert_close, poisoned
    x, qweight, qzeros, s, ref, q = _gemv_problem(K, N)
    for rows, stages in Q.GEMV_V3_CONFIGS:
        out = poisoned((1, N), Q.BF16)
        Q.launch_gemv_v3(x, qweight, qzeros, s, out, rows=rows, stages=stages)
        assert_close(out, ref, dtype="bfloat16", name=f"gemv v3 rows={rows} stages={stages} K={K} N={N}")


def test_gemv_v3_extreme_activations():
    """Large and tiny x: the bf16x2 products and fp32 group sums keep both ends (as v1)."""
    import cupy
    from kernels import quant as Q
    from utils.check import assert_close, poisoned
    K, N = 2048, 512
    q, z, s = _int4_problem(K, N)
    qweight, qzeros = Q.pack_gptq(q, z)
    for scale in (1e-5, 1e4):
        x = (_bf16_normal((1, K)).astype(cupy.float32) * scale).astype(Q.BF16)
        out = poisoned((1, N), Q.BF16)
        Q.launch_gemv_v3(x, qweight, qzeros, s, out)
        assert_close(out, Q.gemv_reference(x, qweight, qzeros, s), dtype="bfloat16", name=f"gemv v3 |x| ~ {scale}")


def test_gemv_v2_is_deterministic_and_repeatable():
    """Split-K sums the partials in split order and leaves the counters at zero: bitwise the same output."""
    import cupy
    from kernels import quant as Q
    from utils.check import poisoned
    K, N = 4096, 2048
    q, z, s = _int4_problem(K, N)
    x = _bf16_normal((1, K))
    qweight, qzeros = Q.pack_gptq(q, z)
    outs = []
    for _ in range(3):
        out = poisoned((1, N), Q.BF16)
        Q.launch_gemv_v2(x, qweight, qzeros, s, out, splits=8)
        outs.append(out.view(cupy.uint16).copy())
    assert all(bool((o == outs[0]).all()) for o in outs)


# Every M of MARLIN_MS (v4: up to its 48); N = 48 and 272: partial CTA tiles (BN = 128 or 256). v2 and v4 share
# the grid, the pipeline and the split-K epilogue; they differ in where the zero point and the scale go.
MARLIN_KERNELS = {"w4a16_marlin": "MARLIN_CONFIGS", "w4a16_marlin_v4_post": "MARLIN_V4_CONFIGS"}


@pytest.mark.parametrize("kernel", list(MARLIN_KERNELS))
@pytest.mark.parametrize("K,N", [(128, 48), (384, 272), (1152, 1040), (8192, 8192)])
def test_marlin_matches_the_reference(K, N, kernel):
    from kernels import quant as Q
    from utils.check import assert_close, poisoned
    qzeros, qmma, s, W = _mma_problem(K, N)
    groups = K // Q.GROUP
    for M, a, ref, ntw, stages in _marlin_cases(K, W, getattr(Q, MARLIN_KERNELS[kernel])):
        for splits in sorted({None, 1, groups}, key=lambda v: -1 if v is None else v):
            out = poisoned((M, N), Q.BF16)
            Q.launch_marlin(a, qmma, qzeros, s, out, ntw=ntw, stages=stages, splits=splits, kernel=kernel)
            assert_close(out, ref, dtype="bfloat16",
                         name=f"{kernel} M={M} K={K} N={N} NTW={ntw} stages={stages} splits={splits}")


@pytest.mark.parametrize("kernel,max_m", [("w4a16_marlin", 64), ("w4a16_marlin_v4_post", 48)])
def test_marlin_extreme_activations_and_rejects(kernel, max_m):
    """Large and tiny activations (fp32 accumulation keeps both), then the launcher's refusals."""
    import cupy
    from kernels import quant as Q
    from utils.check import assert_close, poisoned
    K, N, M = 1024, 256, 16
    qzeros, qmma, s, W = _mma_problem(K, N)
    for scale in (1e-6, 1e3):
        a = (_bf16_normal((M, K)).astype(cupy.float32) * scale).astype(Q.BF16)
        out = poisoned((M, N), Q.BF16)
        Q.launch_marlin(a, qmma, qzeros, s, out, kernel=kernel)
        assert_close(out, a.astype(cupy.float32) @ W, dtype="bfloat16", name=f"{kernel} |a| ~ {scale}")
    big = max_m + 1
    with pytest.raises(ValueError, match=f"M <= {max_m}"):
        Q.launch_marlin(_bf16_normal((big, K)), qmma, qzeros, s, poisoned((big, N), Q.BF16), kernel=kernel)
    with pytest.raises(ValueError, match="not instantiated"):
        Q.launch_marlin(_bf16_normal((M, K)), qmma, qzeros, s, poisoned((M, N), Q.BF16), ntw=2, stages=8,
                        kernel=kernel)


# GEMV v4 reads the shuffled weights (pack_mma): N must be a multiple of 16, so the odd shapes are
# N = 16 (2j + 1) and K with an odd number of groups (1, 3, 33), including fewer groups than warps.
@pytest.mark.parametrize("K,N", [(128, 48), (384, 1008), (1024, 16), (4224, 4112), (8192, 8192)])
def test_gemv_v4_mma_variants(K, N):
    from kernels import quant as Q
    from utils.check import assert_close, poisoned
    x, qweight, qzeros, s, ref, q = _gemv_problem(K, N)
    qmma = Q.pack_mma(q)
    for ntw, warps in Q.GEMV_V4_CONFIGS:
        out = poisoned((1, N), Q.BF16)
        Q.launch_gemv_v4(x, qmma, qzeros, s, out, ntw=ntw, warps=warps)
        assert_close(out, ref, dtype="bfloat16", name=f"gemv v4 NTW={ntw} warps={warps} K={K} N={N}")


def test_gemv_v4_extreme_activations_and_zero_points():
    """The zero point is folded in as - (128 + z) sum(x): large |x| and all-15 zero points stress that cancellation."""
    import cupy
    from kernels import quant as Q
    from utils.check import assert_close, poisoned
    K, N = 2048, 256
    q = cupy.random.randint(0, 16, (K, N), dtype=cupy.int32).astype(cupy.uint8)
    z = cupy.full((K // Q.GROUP, N), 15, dtype=cupy.uint8)
    s = cupy.random.uniform(0.005, 0.02, (K // Q.GROUP, N), dtype=cupy.float32).astype(Q.BF16)
    qweight, qzeros = Q.pack_gptq(q, z)
    qmma = Q.pack_mma(q)
    for scale in (1e-3, 1.0, 300.0):
        x = (cupy.random.standard_normal((1, K), dtype=cupy.float32) * scale + scale).astype(Q.BF16)
        out = poisoned((1, N), Q.BF16)
        Q.launch_gemv_v4(x, qmma, qzeros, s, out)
        assert_close(out, Q.gemv_reference(x, qweight, qzeros, s), dtype="bfloat16", name=f"gemv v4 |x| ~ {scale}")


# GEMV v5: every (BN, rows) instance and several K splits. K = 128: one group (2 or 4 row blocks, fewer
# than the threads sharing a quad); 1152 = 9 groups: uneven splits; N = 40, 1000, 4104: partial BN tiles
# and qzeros rows that are not 16-byte aligned; splits up to the row-block count.
@pytest.mark.parametrize("K,N", [(128, 40), (1152, 1000), (4224, 4104), (16384, 264), (8192, 8192)])
def test_gemv_v5_variants_and_splits(K, N):
    from kernels import quant as Q
    from utils.check import assert_close, poisoned
    x, qweight, qzeros, s, ref, q = _gemv_problem(K, N)
    for bn, rows in Q.GEMV_V5_CONFIGS:
        blocks = K // 8 // rows
        for splits in sorted({None, 1, min(3, blocks), min(8, blocks), blocks}, key=lambda v: -1 if v is None else v):
            out = poisoned((1, N), Q.BF16)
            Q.launch_gemv_v5(x, qweight, qzeros, s, out, bn=bn, rows=rows, splits=splits)
            assert_close(out, ref, dtype="bfloat16", name=f"gemv v5 BN={bn} rows={rows} splits={splits} K={K} N={N}")
    with pytest.raises(ValueError, match="splits"):
        Q.launch_gemv_v5(x, qweight, qzeros, s, poisoned((1, N), Q.BF16), splits=K // 8 // Q.GEMV_V5_DEFAULT[1] + 1)


def test_gemv_v5_is_deterministic_and_extreme_activations():
    """Split-K partials summed in split order, counters left at zero: bitwise repeatable; large and tiny x."""
    import cupy
    from kernels import quant as Q
    from utils.check import assert_close, poisoned
    K, N = 4096, 2048
    q, z, s = _int4_problem(K, N)
    qweight, qzeros = Q.pack_gptq(q, z)
    x = _bf16_normal((1, K))
    outs = []
    for _ in range(3):
        out = poisoned((1, N), Q.BF16)
        Q.launch_gemv_v5(x, qweight, qzeros, s, out, splits=8)
        outs.append(out.view(cupy.uint16).copy())
    assert all(bool((o == outs[0]).all()) for o in outs)
    for scale in (1e-5, 1e4):
        xs = (_bf16_normal((1, K)).astype(cupy.float32) * scale).astype(Q.BF16)
        out = poisoned((1, N), Q.BF16)
        Q.launch_gemv_v5(xs, qweight, qzeros, s, out)
        assert_close(out, Q.gemv_reference(xs, qweight, qzeros, s), dtype="bfloat16", name=f"gemv v5 |x| ~ {scale}")


# Marlin v3 (striped, persistent): every instance for M = 1 .. 64; the CTA count forced small (each CTA walks
# several tiles: whole-tile stores and partial flushes in one launch), odd (tiles split unevenly), the
# automatic one wave, and more CTAs than units (clamped). N = 48, 272, 1040: partial CTA tiles.
@pytest.mark.parametrize("K,N", [(128, 48), (384, 272), (1152, 1040), (8192, 8192)])
def test_marlin_v3_matches_the_reference(K, N):
    from kernels import quant as Q
    from utils.check import assert_close, poisoned
    qzeros, qmma, s, W = _mma_problem(K, N)
    for M, a, ref, ntw, stages in _marlin_cases(K, W, Q.MARLIN_V3_CONFIGS):
        for ctas in (None, 1, 3, 7, 100000):
            out = poisoned((M, N), Q.BF16)
            Q.launch_marlin_v3(a, qmma, qzeros, s, out, ntw=ntw, stages=stages, ctas=ctas)
            assert_close(out, ref, dtype="bfloat16",
                         name=f"marlin v3 M={M} K={K} N={N} NTW={ntw} stages={stages} ctas={ctas}")


def test_marlin_v3_is_deterministic_and_rejects():
    import cupy
    from kernels import quant as Q
    from utils.check import assert_close, poisoned
    K, N, M = 4096, 1024, 16
    qzeros, qmma, s, W = _mma_problem(K, N)
    a = _bf16_normal((M, K))
    outs = []
    for _ in range(3):
        out = poisoned((M, N), Q.BF16)
        Q.launch_marlin_v3(a, qmma, qzeros, s, out, ctas=13)
        outs.append(out.view(cupy.uint16).copy())
    assert all(bool((o == outs[0]).all()) for o in outs)
    for scale in (1e-6, 1e3):
        a = (_bf16_normal((M, K)).astype(cupy.float32) * scale).astype(Q.BF16)
        out = poisoned((M, N), Q.BF16)
        Q.launch_marlin_v3(a, qmma, qzeros, s, out)
        assert_close(out, a.astype(cupy.float32) @ W, dtype="bfloat16", name=f"marlin v3 |a| ~ {scale}")
    with pytest.raises(ValueError, match="M <= 64"):
        Q.launch_marlin_v3(_bf16_normal((65, K)), qmma, qzeros, s, poisoned((65, N), Q.BF16))
    with pytest.raises(ValueError, match="not instantiated"):
        Q.launch_marlin_v3(_bf16_normal((M, K)), qmma, qzeros, s, poisoned((M, N), Q.BF16), ntw=2, stages=8)


# GEMV v6 (tiled qweight): N = 40, 1000, 4104 leave the last 32-column tile partly padded; K = 128 is one
# group (fewer groups than K-slices), 1152 nine (a remainder round).
@pytest.mark.parametrize("K,N", [(128, 40), (1152, 1000), (4096, 4104), (8192, 8192)])
def test_gemv_v6_tiled_matches_the_reference(K, N):
    from kernels import quant as Q
    from utils.check import assert_close, poisoned
    q, z, s = _int4_problem(K, N)
    x = _bf16_normal((1, K))
    qweight, qzeros = Q.pack_gptq(q, z)
    qtiled = Q.pack_gemv_tiled(qweight)
    out = poisoned((1, N), Q.BF16)
    Q.launch_gemv_v6(x, qtiled, qzeros, s, out)
    assert_close(out, Q.gemv_reference(x, qweight, qzeros, s), dtype="bfloat16", name=f"gemv v6 K={K} N={N}")
    with pytest.raises(ValueError, match="qtiled"):
        Q.launch_gemv_v6(x, qweight, qzeros, s, out)          # the GPTQ layout itself is refused



# PyTorch's tinygemm as a peer: pack_tinygemm must hand it the same weights (up to the bf16 rounding of
# its zero = (8 - z) s), at M = 1 and an odd M, and reject mismatched group tensors.
@pytest.mark.parametrize("M,K,N", [(1, 1024, 256), (5, 8192, 1024)])
def test_pack_tinygemm_matches_the_reference(M, K, N):
    import cupy
    import torch
    from kernels import quant as Q
    from kernels.softmax import as_torch, from_torch
    from utils.check import assert_close
    if not hasattr(torch, "_weight_int4pack_mm"):
        pytest.skip("this PyTorch build has no torch._weight_int4pack_mm")
    q, z, s = _int4_problem(K, N)
    W = Q.dequantize_int4(q, s, z).astype(cupy.float32)
    a = _bf16_normal((M, K))
    w, sz = Q.pack_tinygemm(q, z, s)
    out = from_torch(torch._weight_int4pack_mm(as_torch(a), w, Q.GROUP, sz))
    assert_close(out, a.astype(cupy.float32) @ W, dtype="bfloat16", name=f"tinygemm M={M} K={K} N={N}")
    with pytest.raises(ValueError, match="expected shape"):
        Q.pack_tinygemm(q, z[:-1], s)
