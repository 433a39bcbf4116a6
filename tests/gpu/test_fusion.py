"""Every fused kernel and its CuPy library route on fresh random bf16 inputs with poisoned outputs,
against the float64 reference of the fp32-math formula: rows 1, 37, 199; widths that are not multiples
of 8 (the scalar paths) beside multiples of 8 (the 16-byte paths)."""
import pytest

pytestmark = pytest.mark.gpu


def randn(shape):
    import cupy
    from kernels.fusion import BF16
    return cupy.random.standard_normal(shape, dtype=cupy.float32).astype(BF16)


@pytest.mark.parametrize("shape", [(1, 8), (37, 4104), (199, 1000), (37, 1001), (1, 13), (199, 4096)],
                         ids=lambda s: f"{s[0]}x{s[1]}")
def test_bias_gelu(shape):
    from kernels import fusion as F
    from utils.check import assert_close, poisoned
    x, b = randn(shape), randn((shape[1],))
    ref = F.reference_bias_gelu(x, b)
    for name, fn in (("bias_gelu_v1_vec8", F.bias_gelu), ("bias_gelu_v2_poly", F.bias_gelu_v2),
                     ("cupy", F.cupy_bias_gelu)):
        y = poisoned(shape, F.BF16)
        fn(x, b, y)
        assert_close(y, ref, dtype="bfloat16", name=f"{name} {shape}")


@pytest.mark.parametrize("shape", [(37, 4104), (5, 1001)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_bias_gelu_elementwise_over_a_wide_range(shape):
    """v = x + b over [-16, 16] (both tails, past the polynomial's clamp at 13): every element within one
    bf16 rounding of the float64 value (relative 2^-8, the largest half-ulp, plus the formula's error),
    or within 1e-30 where the value is tiny. v1 (erff) is held to the same test for v >= -4 only: below,
    1 + erff(v / sqrt 2) cancels (fp32 ulp of 1 against Phi(-5) = 3e-7) and its relative error grows."""
    import cupy
    from kernels import fusion as F
    from utils.check import poisoned
    x = (cupy.random.uniform(-16, 16, shape, dtype=cupy.float32)).astype(F.BF16)
    b = (cupy.random.uniform(-0.5, 0.5, shape[1], dtype=cupy.float32)).astype(F.BF16)
    ref = F.reference_bias_gelu(x, b)
    for name, fn in (("bias_gelu_v1_vec8", F.bias_gelu), ("bias_gelu_v2_poly", F.bias_gelu_v2)):
        y = poisoned(shape, F.BF16)
        fn(x, b, y)
        err = cupy.abs(y.astype(cupy.float64) - ref)
        ok = err <= (2.0**-8 + 1e-4) * cupy.abs(ref) + 1e-30
        if name == "bias_gelu_v1_vec8":
            ok |= (x.astype(cupy.float64) + b.astype(cupy.float64)[None, :]) < -4
        assert bool(ok.all()), f"{name}: {int((~ok).sum())} elements off, worst abs error {float(err.max()):.3e}"


def test_bias_gelu_v2_special_values():
    import cupy
    from kernels import fusion as F
    from utils.check import poisoned
    vals = [0.0, -0.0, 1.0, -1.0, 13.0, -13.0, 100.0, -100.0, float("inf"), float("-inf"), float("nan"), 3.0e38]
    x = cupy.asarray(vals * 2, dtype=cupy.float32).astype(F.BF16).reshape(1, -1)    # 24 columns: 16-byte path
    b = cupy.zeros(x.shape[1], cupy.float32).astype(F.BF16)
    y = poisoned(x.shape, F.BF16)
    F.bias_gelu_v2(x, b, y)
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
                                       (5, 2, 2, 6)])
def test_rope(T, Hq, Hk, D):
    import cupy
    from kernels import fusion as F
    from utils.check import assert_close, poisoned
    q, k = randn((T, Hq, D)), randn((T, Hk, D))
    cos, sin = F.rope_tables(T, D // 2, xp=cupy)
    q_ref, k_ref = F.reference_rope(q, cos, sin), F.reference_rope(k, cos, sin)
    for name, fn in (("rope_neox_v1_vec8", F.rope), ("cupy", F.cupy_rope)):
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
