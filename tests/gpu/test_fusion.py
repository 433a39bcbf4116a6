"""Every fused kernel and its CuPy library route on fresh random bf16 inputs with poisoned outputs,
against the float64 reference of the fp32-math formula: rows 1, 37, 199; widths that are not multiples
of 8 (the scalar paths) beside multiples of 8 (the 16-byte paths)."""
import numpy as np
import pytest

pytestmark = pytest.mark.gpu
pytest.importorskip("ml_dtypes")

SEED = 8


def randn(shape, seed):
    from utils.arrays import random_normal
    return random_normal(shape, "bfloat16", seed=seed)[0]


def all_versions(op):
    """(label, config) of every version of ``op`` and every config it instantiates."""
    from kernels import fusion as F
    reg = F.REGISTRIES[op]
    return [(lab, cfg) for lab in reg for cfg in (reg[lab].all_configs() or (None,))]


def ids(cases):
    return [f"{lab}" + ("" if cfg is None else f"[{cfg.rows},{cfg.gelu}]") for lab, cfg in cases]


BIAS_GELU_SHAPES = [(1, 8), (37, 4104), (199, 1000), (37, 1001), (1, 13), (199, 4096), (9, 2056)]


@pytest.mark.parametrize("shape", BIAS_GELU_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("label,config", all_versions("bias_gelu"), ids=ids(all_versions("bias_gelu")))
def test_bias_gelu(label, config, shape):
    """Every bias_gelu version and instance (v3's row counts and its erff instance): row counts that leave the
    last row block short (37, 199, 9 rows against 2, 4, 8 rows per thread), column counts with a partial column
    block (4104 = 513 chunks, 2056 = 257) and the scalar paths (1001, 13)."""
    from kernels import fusion as F
    from utils.check import assert_close, poisoned
    seed = SEED + shape[0] * 100003 + shape[1]
    x, b = randn(shape, seed), randn((shape[1],), seed + 1)
    y = poisoned(shape, F.BF16)
    F.BIAS_GELU[label](x, b, y, config=config)
    assert_close(y, F.reference_bias_gelu(x, b), dtype="bfloat16", name=f"{label} {config} {shape} (seed {seed})")


@pytest.mark.parametrize("op,shapes", [
    ("bias_gelu", [(37, 1001), (1001,), (37, 1001)]), ("swiglu", [(37, 2006), (37, 1003)]),
    ("add_rmsnorm", [(37, 4100), (37, 4100), (4100,), (37, 4100), (37, 4100)])])
def test_cupy_route(op, shapes):
    import cupy

    from kernels import fusion as F
    from utils.check import assert_close, poisoned
    args = [randn(s, SEED + i) for i, s in enumerate(shapes[:-2 if op == "add_rmsnorm" else -1])]
    outs = [poisoned(s, F.BF16) for s in shapes[len(args):]]
    extra = (cupy.empty(shapes[0][0], cupy.float32),) if op == "add_rmsnorm" else ()
    F.CUPY_ROUTE[op](*args, *outs, *extra)
    refs = {"bias_gelu": lambda: (F.reference_bias_gelu(*args),), "swiglu": lambda: (F.reference_swiglu(*args),),
            "add_rmsnorm": lambda: F.reference_add_rmsnorm(*args)}[op]()
    for o, r in zip(outs, refs):
        assert_close(o, r, dtype="bfloat16", name=f"cupy {op} (seed {SEED})")


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
    rng = np.random.default_rng(SEED)
    x = cupy.asarray(rng.uniform(-16, 16, shape).astype(np.float32)).astype(F.BF16)
    b = cupy.asarray(rng.uniform(-0.5, 0.5, shape[1]).astype(np.float32)).astype(F.BF16)
    ref = F.reference_bias_gelu(x, b)
    v = x.astype(cupy.float64) + b.astype(cupy.float64)[None, :]
    phi = 0.5 * erfc(-v / 2**0.5)
    for label, config in all_versions("bias_gelu"):
        name = f"{label} {config}"
        y = poisoned(shape, F.BF16)
        F.BIAS_GELU[label](x, b, y, config=config)
        uses_erf = label == "v1_vec8" or (config is not None and config.gelu == "erf")
        d = 1e-4 + (2.0**-24 / cupy.maximum(phi, 1e-300) if uses_erf else 0.0)
        err = cupy.abs(y.astype(cupy.float64) - ref)
        ok = err <= (2.0**-8 + d) * cupy.abs(ref) + 1e-30
        if not bool(ok.all()):
            bad = cupy.nonzero(~ok.ravel())[0]
            w = int(bad[cupy.argmax(err.ravel()[bad] / cupy.abs(ref.ravel()[bad]))])
            raise AssertionError(f"{name}: {bad.size} elements off; worst at v = {float(v.ravel()[w]):.6g}: "
                                 f"got {float(y.astype(cupy.float64).ravel()[w]):.6g}, "
                                 f"expected {float(ref.ravel()[w]):.6g}")


POLY = [(lab, cfg) for lab, cfg in all_versions("bias_gelu") if lab != "v1_vec8" and (cfg is None or cfg.gelu == "poly")]


@pytest.mark.parametrize("label,config", POLY, ids=ids(POLY))
def test_bias_gelu_poly_special_values(label, config):
    import cupy

    from kernels import fusion as F
    from utils.check import poisoned
    vals = [0.0, -0.0, 1.0, -1.0, 13.0, -13.0, 100.0, -100.0, float("inf"), float("-inf"), float("nan"), 3.0e38]
    x = cupy.asarray(vals * 2, dtype=cupy.float32).astype(F.BF16).reshape(1, -1)    # 24 columns: 16-byte path
    b = cupy.zeros(x.shape[1], cupy.float32).astype(F.BF16)
    y = poisoned(x.shape, F.BF16)
    F.BIAS_GELU[label](x, b, y, config=config)
    got = cupy.asnumpy(y.astype(cupy.float32))[0, :len(vals)]
    xs = cupy.asnumpy(x.astype(cupy.float32))[0, :len(vals)]
    assert got[0] == 0 and got[1] == 0
    assert abs(got[2] - 0.8413447) < 4e-3 and abs(got[3] + 0.1586553) < 1e-3
    assert got[4] == xs[4] and got[6] == 100.0 and got[8] == float("inf") and got[11] == xs[11]
    assert abs(got[5]) < 1e-30 and got[7] == 0 and got[9] == 0          # the limit at -inf (torch: NaN)
    assert got[10] != got[10]                                             # NaN stays NaN


@pytest.mark.parametrize("shape", [(1, 16), (37, 2000), (199, 2006), (37, 22016), (1, 2)],
                         ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("label", ["v1_vec8"])
def test_swiglu(label, shape):
    from kernels import fusion as F
    from utils.check import assert_close, poisoned
    seed = SEED + shape[0] * 100003 + shape[1]
    x = randn(shape, seed)
    y = poisoned((shape[0], shape[1] // 2), F.BF16)
    F.SWIGLU[label](x, y)
    assert_close(y, F.reference_swiglu(x), dtype="bfloat16", name=f"swiglu {label} {shape} (seed {seed})")


@pytest.mark.parametrize("shape", [(1, 4096), (37, 4100), (199, 1001), (37, 8192), (5, 16384), (3, 13)],
                         ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("label", ["v1_vec8"])
def test_add_rmsnorm(label, shape):
    from kernels import fusion as F
    from utils.check import assert_close, poisoned
    seed = SEED + shape[0] * 100003 + shape[1]
    x, r, w = randn(shape, seed), randn(shape, seed + 1), randn((shape[1],), seed + 2)
    h_ref, y_ref = F.reference_add_rmsnorm(x, r, w)
    ro, y = poisoned(shape, F.BF16), poisoned(shape, F.BF16)
    F.ADD_RMSNORM[label](x, r, w, ro, y)
    name = f"add_rmsnorm {label} {shape} (seed {seed})"
    assert_close(ro, h_ref, tol=0.0, name=f"{name} residual")   # one rounding of an exact sum
    assert_close(y, y_ref, dtype="bfloat16", name=f"{name} y")


@pytest.mark.parametrize("T,Hq,Hk,D", [(1, 32, 32, 128), (37, 8, 2, 128), (199, 4, 4, 64), (37, 3, 1, 20),
                                       (5, 2, 2, 6), (3, 40, 8, 128), (2, 2, 1, 1024), (3, 1, 2, 600)])
@pytest.mark.parametrize("label", ["v1_vec8", "v2_tok", "cupy"])
def test_rope(label, T, Hq, Hk, D):
    import cupy

    from kernels import fusion as F
    from utils.check import assert_close, poisoned
    seed = SEED + T * 1009 + Hq * 101 + Hk * 11 + D
    q, k = randn((T, Hq, D), seed), randn((T, Hk, D), seed + 1)
    cos, sin = F.rope_tables(T, D // 2, xp=cupy)
    qo, ko = poisoned(q.shape, F.BF16), poisoned(k.shape, F.BF16)
    (F.cupy_rope if label == "cupy" else F.ROPE[label])(q, k, cos, sin, qo, ko)
    name = f"rope {label} (seed {seed})"
    assert_close(qo, F.reference_rope(q, cos, sin), dtype="bfloat16", name=f"{name} q {(T, Hq, D)}")
    assert_close(ko, F.reference_rope(k, cos, sin), dtype="bfloat16", name=f"{name} k {(T, Hk, D)}")


def test_versions_reject_bad_device_arrays():
    import cupy

    from kernels import fusion as F
    x = randn((4, 16), SEED)
    with pytest.raises(ValueError, match="dtype bfloat16"):
        F.BIAS_GELU["v1_vec8"](x.astype(cupy.float32), randn((16,), SEED), randn((4, 16), SEED))
    with pytest.raises(ValueError, match="C-contiguous"):
        F.SWIGLU["v1_vec8"](randn((16, 4), SEED).T, randn((4, 8), SEED))
    with pytest.raises(ValueError, match=r"y: expected shape \(4, 16\)"):
        F.ADD_RMSNORM["v1_vec8"](x, x, randn((16,), SEED), randn((4, 16), SEED), randn((16, 4), SEED))
