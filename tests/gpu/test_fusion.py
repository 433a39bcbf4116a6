"""Every fused kernel and its CuPy library route on fresh random bf16 inputs with poisoned outputs,
against the float64 reference of the fp32-math formula: rows 1, 37, 199; widths that are not multiples
of 8 (the scalar paths) beside multiples of 8 (the 16-byte paths)."""
import pytest

pytestmark = pytest.mark.gpu


def randn(shape):
    import cupy
    from kernels.fusion import BF16
    return cupy.random.standard_normal(shape, dtype=cupy.float32).astype(BF16)


@pytest.mark.parametrize("shape", [(1, 8), (37, 4104), (199, 1000), (37, 1001), (1, 13), (199, 4096), (9, 2056)],
                         ids=lambda s: f"{s[0]}x{s[1]}")
def test_bias_gelu(shape):
    """Every bias_gelu kernel, incl. v3's tuning instances: row counts that leave the last row block short
    (37, 199, 9 rows against 2, 4, 8 rows per thread), column counts with a partial column block (4104 = 513
    chunks, 2056 = 257) and the scalar paths (1001, 13)."""
    from kernels import fusion as F
    from utils.check import assert_close, poisoned
    x, b = randn(shape), randn((shape[1],))
    ref = F.reference_bias_gelu(x, b)
    fns = [(k, lambda x_, b_, y_, k=k: F.bias_gelu(x_, b_, y_, kernel=k)) for k in F.BIAS_GELU_KERNELS]
    for name, fn in fns + [("cupy", F.cupy_bias_gelu)]:
        y = poisoned(shape, F.BF16)
        fn(x, b, y)
        assert_close(y, ref, dtype="bfloat16", name=f"{name} {shape}")


@pytest.mark.parametrize("shape", [(37, 4104), (5, 1001)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_bias_gelu_elementwise_over_a_wide_range(shape):
    """v = x + b over [-16.5, 16.5] (both tails, past the polynomial's clamp at 13). Each element must be
    within half a bf16 ulp of the float64 value (bounded by 2^-8 relative, the largest half-ulp) plus the
    formula's own error d(v) relative, or within 1e-30 where the value is tiny: the fp32 result is within
    d(v) of the exact value and rounds to the nearest bf16, so when the exact value lies near a rounding
    boundary the output can legitimately land one ulp away, and the test must allow d(v) on top of the
    half ulp. d = 1e-4 for the polynomial GELU (its bound 4.4e-5 plus fp32 roundings). For erff (v1 and
    its 2-D instance): erff is within 2 fp32 ulps (2^-23) of erf, so 1 + erff(v / sqrt 2) = 2 Phi(v) is
    off by up to 2^-23 absolute, 2^-24 / Phi(v) relative: 1.9e-3 at v = -4, growing without bound below
    (the cancellation the chapter describes); d = 1e-4 + 2^-24 / Phi(v).
    The first batch (2026-11-29) failed here for two reasons, both in this test, not in the kernels: the
    reference computed 1 + erf in float64, which cancels to 0 for v < -8.3 (now erfc, see
    reference_bias_gelu), and v1 was held to d = 1e-4 for -4 <= v < -3.2, where erff's bound is larger."""
    import cupy
    from cupyx.scipy.special import erfc
    from kernels import fusion as F
    from utils.check import poisoned
    x = (cupy.random.uniform(-16, 16, shape, dtype=cupy.float32)).astype(F.BF16)
    b = (cupy.random.uniform(-0.5, 0.5, shape[1], dtype=cupy.float32)).astype(F.BF16)
    ref = F.reference_bias_gelu(x, b)
    v = x.astype(cupy.float64) + b.astype(cupy.float64)[None, :]
    phi = 0.5 * erfc(-v / 2**0.5)
    for name in F.BIAS_GELU_KERNELS:
        y = poisoned(shape, F.BF16)
        F.bias_gelu(x, b, y, kernel=name)
        d = 1e-4 + (2.0**-24 / cupy.maximum(phi, 1e-300) if "v1" in name or "erf" in name else 0.0)
        err = cupy.abs(y.astype(cupy.float64) - ref)
        ok = err <= (2.0**-8 + d) * cupy.abs(ref) + 1e-30
        if not bool(ok.all()):
            bad = cupy.nonzero(~ok.ravel())[0]
            w = int(bad[cupy.argmax((err.ravel()[bad] / cupy.abs(ref.ravel()[bad])))])
            raise AssertionError(f"{name}: {bad.size} elements off; worst at v = {float(v.ravel()[w]):.6g}: "
                                 f"got {float(y.astype(cupy.float64).ravel()[w]):.6g}, "
                                 f"expected {float(ref.ravel()[w]):.6g}")


@pytest.mark.parametrize("kernel", ["bias_gelu_v2_poly", "bias_gelu_v3_rows2", "bias_gelu_v3_rows4",
                                    "bias_gelu_v3_rows8"])
def test_bias_gelu_v2_special_values(kernel):
    import cupy
    from kernels import fusion as F
    from utils.check import poisoned
    vals = [0.0, -0.0, 1.0, -1.0, 13.0, -13.0, 100.0, -100.0, float("inf"), float("-inf"), float("nan"), 3.0e38]
    x = cupy.asarray(vals * 2, dtype=cupy.float32).astype(F.BF16).reshape(1, -1)    # 24 columns: 16-byte path
    b = cupy.zeros(x.shape[1], cupy.float32).astype(F.BF16)
    y = poisoned(x.shape, F.BF16)
    F.bias_gelu(x, b, y, kernel=kernel)
    got = cupy.asnumpy(y.astype(cupy.float32))[0, :len(vals)]
    xs = cupy.asnumpy(x.astype(cupy.float32))[0, :len(vals)]
    assert got[0] == 0 and got[1] == 0
    assert abs(got[2] - 0.8413447) < 4e-3 and abs(got[3] + 0.1586553) < 1e-3
    assert got[4] == xs[4] and got[6] == 100.0 and got[8] == float("inf") and got[11] == xs[11]
    assert abs(got[5]) < 1e-30 and got[7] == 0 and got[9] == 0          # the limit at -inf (torch: NaN)
    assert got[10] != got[10]                                             # NaN stays NaN


@pytest.mark.parametrize("shape", [(1, 16), (37, 2000), (199, 2006), (37, 22016), (1, 2)],
                         ids=lambda s: f"{s[0]}x{s[1]}")
def test_swiglu(shape):
    from kernels import fusion as F
    from utils.check import assert_close, poisoned
    x = randn(shape)
    ref = F.reference_swiglu(x)
    for name, fn in (("swiglu_v1_vec8", F.swiglu), ("cupy", F.cupy_swiglu)):
        y = poisoned((shape[0], shape[1] // 2), F.BF16)
        fn(x, y)
        assert_close(y, ref, dtype="bfloat16", name=f"{name} {shape}")


@pytest.mark.parametrize("shape", [(1, 4096), (37, 4100), (199, 1001), (37, 8192), (5, 16384), (3, 13)],
                         ids=lambda s: f"{s[0]}x{s[1]}")
def test_add_rmsnorm(shape):
    import cupy
    from kernels import fusion as F
    from utils.check import assert_close, poisoned
    x, r, w = randn(shape), randn(shape), randn((shape[1],))
    h_ref, y_ref = F.reference_add_rmsnorm(x, r, w)
    ss = cupy.empty(shape[0], cupy.float32)
    for name, fn in (("add_rmsnorm_v1_vec8", F.add_rmsnorm),
                     ("cupy", lambda *a: F.cupy_add_rmsnorm(*a, ss))):
        ro, y = poisoned(shape, F.BF16), poisoned(shape, F.BF16)
        fn(x, r, w, ro, y)
        assert_close(ro, h_ref, tol=0.0, name=f"{name} residual {shape}")   # one rounding of an exact sum
        assert_close(y, y_ref, dtype="bfloat16", name=f"{name} y {shape}")


@pytest.mark.parametrize("T,Hq,Hk,D", [(1, 32, 32, 128), (37, 8, 2, 128), (199, 4, 4, 64), (37, 3, 1, 20),
                                       (5, 2, 2, 6), (3, 40, 8, 128), (2, 2, 1, 1024), (3, 1, 2, 600)])
def test_rope(T, Hq, Hk, D):
    import cupy
    from kernels import fusion as F
    from utils.check import assert_close, poisoned
    q, k = randn((T, Hq, D)), randn((T, Hk, D))
    cos, sin = F.rope_tables(T, D // 2, xp=cupy)
    q_ref, k_ref = F.reference_rope(q, cos, sin), F.reference_rope(k, cos, sin)
    for name, fn in (("rope_neox_v1_vec8", F.rope), ("rope_neox_v2_tok", F.rope_v2), ("cupy", F.cupy_rope)):
        qo, ko = poisoned(q.shape, F.BF16), poisoned(k.shape, F.BF16)
        fn(q, k, cos, sin, qo, ko)
        assert_close(qo, q_ref, dtype="bfloat16", name=f"{name} q {(T, Hq, D)}")
        assert_close(ko, k_ref, dtype="bfloat16", name=f"{name} k {(T, Hk, D)}")


def test_launchers_reject_bad_arguments():
    import cupy
    from kernels import fusion as F
    x = randn((4, 16))
    with pytest.raises(ValueError, match="dtype bfloat16"):
        F.bias_gelu(x.astype(cupy.float32), randn((16,)), randn((4, 16)))
    with pytest.raises(ValueError, match="C-contiguous"):
        F.swiglu(randn((16, 4)).T, randn((4, 8)))
    with pytest.raises(ValueError, match=r"y: expected shape \(4, 16\)"):
        F.add_rmsnorm(x, x, randn((16,)), randn((4, 16)), randn((16, 4)))
