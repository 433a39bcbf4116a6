"""Every hgemm version (chapter 12) on fresh seeded bf16 inputs, C poisoned with NaN: M, N and K of 1, 37, 199 and
4095 in combinations, single rows and columns, K below one k16 step; both instances (16-byte and element-wise)
including misaligned pointers; every v3 config; nothing written past C; clear errors for bad arguments; the
cuBLAS peer on the same data; HMMA in the SASS of the mma.sync versions."""
import numpy as np
import pytest

pytestmark = pytest.mark.gpu

SEED = 2026
SHAPES = [(1, 1, 1), (1, 4096, 4096), (4096, 1, 4096), (37, 199, 1823), (199, 37, 4095), (4095, 4095, 37),
          (33, 65, 7), (128, 256, 64), (4095, 4097, 1023), (1024, 1024, 1024)]


def _seed(*what) -> int:
    import zlib
    return (SEED * 1_000_003 + zlib.crc32(repr(what).encode())) % 2**31


def _inputs(M, N, K, *what):
    from utils.arrays import random_normal
    s = _seed(M, N, K, *what)
    return random_normal((M, K), "bfloat16", seed=s)[0], random_normal((K, N), "bfloat16", seed=s + 1)[0], s


def _labels():
    from kernels import hgemm as H
    return list(H.HGEMM)


def _name(shape):
    return "x".join(map(str, shape))


@pytest.mark.parametrize("shape", SHAPES, ids=_name)
@pytest.mark.parametrize("label", _labels())
def test_every_version_with_c_poisoned(label, shape):
    from kernels import hgemm as H
    from utils.arrays import bf16
    from utils.check import assert_close, poisoned
    a, b, seed = _inputs(*shape, "poisoned")
    c = poisoned((shape[0], shape[1]), bf16())
    H.HGEMM[label](a, b, c)
    assert_close(c, H.reference(a, b), dtype="bfloat16", name=f"{label} {_name(shape)} (seed {seed})")


def _offset_view(x, off):
    """``x`` copied into a buffer ``off`` elements past a 256-byte boundary (2-byte aligned; 16 if off % 8 == 0)."""
    import cupy
    buf = cupy.zeros(off + x.size, dtype=x.dtype)
    v = buf[off:off + x.size].reshape(x.shape)
    v[...] = x
    return v


# (shape, offsets of a, b, c in elements, whether v0-v3's 16-byte instance runs); v4-v8 run their own kernel
# where TMA can read A and B (16-byte row strides, 128-byte aligned bases), padded copies and v3 elsewhere
PATHS = [((256, 256, 128), (0, 0, 0), True), ((300, 520, 40), (0, 0, 2), True), ((256, 256, 128), (1, 0, 0), False),
         ((300, 520, 40), (0, 8, 1), False), ((300, 522, 40), (0, 0, 0), False), ((64, 64, 60), (0, 0, 0), False),
         ((256, 256, 128), (8, 0, 0), True), ((640, 384, 200), (0, 64, 0), True), ((256, 256, 128), (0, 0, 1), False)]


def _tma_readable(shape, offs) -> bool:
    return shape[1] % 8 == 0 and shape[2] % 8 == 0 and offs[0] % 64 == 0 and offs[1] % 64 == 0


@pytest.mark.parametrize("case", PATHS, ids=lambda c: f"{_name(c[0])}-off{'-'.join(map(str, c[1]))}")
@pytest.mark.parametrize("label", _labels())
def test_both_instances(label, case):
    import cupy

    from kernels import hgemm as H
    from utils.arrays import bf16
    from utils.check import assert_close
    shape, offs, vec = case
    a, b, seed = _inputs(*shape, "paths")
    c = _offset_view(cupy.zeros(shape[:2], bf16()), offs[2])
    c[...] = np.nan
    a, b = _offset_view(a, offs[0]), _offset_view(b, offs[1])
    v = H.HGEMM[label]
    launches = v.launches(v.validate(a, b, c))
    kernels = " + ".join(ln.kernel for ln in launches)
    if v.number >= 4:
        assert H.is_fallback(launches) != _tma_readable(shape, offs), kernels
    else:
        assert launches[0].kernel.endswith(", true>" if vec else ", false>"), kernels
    v(a, b, c)
    assert_close(c, H.reference(a, b), dtype="bfloat16", name=f"{label} {kernels} offsets {offs} (seed {seed})")


@pytest.mark.parametrize("shape", [(1, 1, 1), (37, 199, 1823), (300, 520, 40), (4095, 4097, 1023)], ids=_name)
def test_every_config_of_v3(shape):
    from kernels import hgemm as H
    from utils.arrays import bf16
    from utils.check import assert_close, poisoned
    a, b, seed = _inputs(*shape, "configs")
    ref = H.reference(a, b)
    for config in H.V3_CONFIGS:
        c = poisoned((shape[0], shape[1]), bf16())
        H.HGEMM["v3_pipeline"](a, b, c, config=config)
        assert_close(c, ref, dtype="bfloat16", name=f"v3 {config} {_name(shape)} (seed {seed})")


@pytest.mark.parametrize("label", _labels())
def test_nothing_written_past_c(label):
    import cupy

    from kernels import hgemm as H
    from utils.arrays import bf16
    M, N, K = 70, 133, 48
    a, b, _ = _inputs(M, N, K, "tail")
    buf = cupy.full(M * N + 4096, np.nan, dtype=np.float32).astype(bf16())
    c = buf[:M * N].reshape(M, N)
    H.HGEMM[label](a, b, c)
    assert bool(cupy.isfinite(c.astype(np.float32)).all()) and bool(cupy.isnan(buf[M * N:].astype(np.float32)).all())


@pytest.mark.parametrize("label", _labels())
def test_bad_arguments_get_a_value_error(label):
    import cupy

    from kernels import hgemm as H
    from utils.arrays import bf16
    a, b, _ = _inputs(4, 5, 6, "errors")
    c = cupy.empty((4, 5), bf16())
    v = H.HGEMM[label]
    with pytest.raises(ValueError, match="CUDA device array"):
        v(a.get(), b, c)
    with pytest.raises(ValueError, match="dtype bfloat16"):
        v(a.astype(cupy.float32), b, c)
    with pytest.raises(ValueError, match="C-contiguous"):
        v(a, b, cupy.empty((5, 4), bf16()).T)
    with pytest.raises(ValueError, match="expected 6 rows"):
        v(a, b[:5], c)
    with pytest.raises(ValueError, match="overlaps"):
        v(a, b, b.reshape(-1)[:20].reshape(4, 5))       # c inside b's memory


def test_cublas_peer_matches_the_reference():
    from kernels import hgemm as H
    from kernels.hgemm import ladders
    from utils.check import assert_close
    seed = _seed("peer")
    case = ladders.make((37, 199, 1823), "bfloat16", np.random.default_rng(seed))
    a, b, _ = case.args
    assert_close(ladders.cublas_peer(case)(), H.reference(a, b), dtype="bfloat16", name=f"cupy.matmul (seed {seed})")


@pytest.mark.parametrize("label", _labels())
def test_tensor_core_instructions_in_the_sass(label):
    """HMMA.16816 (mma.sync) in the SASS of v0-v3, HGMMA (wgmma) with TMA loads (UTMALDG) in v4 on."""
    from kernels import hgemm as H
    from kernels.hgemm import ladders
    try:
        counts = ladders.sass_counts(H.HGEMM[label])
    except FileNotFoundError as e:
        pytest.skip(str(e))
    if H.HGEMM[label].number < 4:
        assert counts.get("HMMA", 0) > 0, counts
    else:
        assert counts.get("HGMMA", 0) > 0 and counts.get("UTMALDG", 0) > 0 and counts.get("HMMA", 0) == 0, counts
