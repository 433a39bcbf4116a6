"""Every reduction version on fresh seeded random data (mean 1, so the sum is well conditioned), poisoned
outputs, sizes that are not multiples of any block or vector width, within each version's own error bound;
exact integer sums for every config; the single-pass versions bitwise reproducible."""
import numpy as np
import pytest

pytestmark = pytest.mark.gpu
pytest.importorskip("ml_dtypes")

SEED = 5
SIZES = [1, 37, 199, 4099, (1 << 20) + 3]


def _labels():
    from kernels import reduction as R
    return list(R.VERSIONS)


def _version_or_skip(label, dtype="float32"):
    from kernels import reduction as R
    from utils.gpu import supports
    v = R.VERSIONS[label]
    missing = [f for f in v.requires if not supports(f)]
    if missing:
        pytest.skip(f"{v.name} needs {', '.join(missing)}")
    if dtype == "bfloat16" and label not in R.BF16_VERSIONS:
        pytest.skip(f"{v.name} sums float32 only")
    return v


def _data(n, dtype, seed):
    from utils.arrays import bf16, random_normal
    x, _ = random_normal((n,), "float32", seed=seed)
    x += 1                                    # in fp32, then rounded once to bf16
    return x if dtype == "float32" else x.astype(bf16())


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("label", _labels())
def test_version_within_its_bound(label, n, dtype):
    from kernels import reduction as R
    from utils.check import poisoned
    v = _version_or_skip(label, dtype)
    seed = SEED * 1000 + n
    x = _data(n, dtype, seed)
    out = poisoned((1,), np.float32)
    v(x, out)
    R.check_within_bound(label, x, out, name=f"{v.name} {dtype} n={n} (seed {seed})")


# Small non-negative integers: every partial sum is an integer below 2**24, so fp32 adds them exactly in
# any order and every version must return the exact total. A dropped, doubled or misplaced element
# (tail, grid-stride remainder, partials loop) shows as a wrong integer, however loose the error bound.
EXACT = [(1, 8), (37, 8), (4099, 8), ((1 << 20) + 3, 8), (3 * (1 << 22) + 5, 2)]


def _ints(n, high, dtype, seed):
    import cupy

    from utils.arrays import bf16
    k = cupy.asarray(np.random.default_rng(seed).integers(0, high, size=n, dtype=np.int32))
    exact = int(k.sum(dtype=cupy.int64))
    assert exact < 2**24
    x = k.astype(cupy.float32)
    return (x if dtype == "float32" else x.astype(bf16())), exact


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("n,high", EXACT)
@pytest.mark.parametrize("label", _labels())
def test_every_element_counted_exactly_once(label, n, high, dtype):
    from utils.check import poisoned
    v = _version_or_skip(label, dtype)
    x, exact = _ints(n, high, dtype, SEED + n)
    out = poisoned((1,), np.float32)
    v(x, out)
    got = float(out[0])
    assert got == exact, f"{v.name} {dtype} n={n} (seed {SEED + n}): got {got!r}, expected exactly {exact}"


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("label", ["v4_vec", "v5_lastblock", "v6_cluster"])
def test_every_config_exact(label, dtype):
    """Every instantiated grid: 1 block per SM (v6 rounds 132 blocks up to whole clusters), 32 per SM (4 waves,
    more than 1024 partials: the 4-load loop of sum_partials), every cluster size."""
    from utils.check import poisoned
    v = _version_or_skip(label, dtype)
    n = 3 * (1 << 22) + 5
    x, exact = _ints(n, 2, dtype, SEED)
    for cfg in v.all_configs():
        out = poisoned((1,), np.float32)
        v(x, out, config=cfg)
        got = float(out[0])
        assert got == exact, f"{v.name} {dtype} {cfg} (seed {SEED}): got {got!r}, expected exactly {exact}"


@pytest.mark.parametrize("label", ["v1_interleaved", "v4_vec", "v5_lastblock", "v6_cluster"])
def test_bitwise_reproducible_and_rearmed(label):
    """The same input gives the same bits, launch after launch of one bound plan (v5/v6: the last block
    re-arms the ticket counter, or the second launch would never find its last block)."""
    import cupy
    v = _version_or_skip(label)
    x = _data((1 << 24) + 5, "float32", SEED)
    out = cupy.full((1,), np.nan, cupy.float32)
    run = v.bind(x, out)
    bits = set()
    for _ in range(5):
        out.fill(np.nan)
        run()
        bits.add(int(out.view(np.uint32)[0]))
    assert len(bits) == 1, f"{v.name}: {len(bits)} different results from the same input (seed {SEED})"
    assert np.isfinite(float(out[0]))


def test_device_arrays_rejected_with_a_reason():
    import cupy

    from kernels import reduction as R
    v = R.VERSIONS["v5_lastblock"]
    x = cupy.ones(64, cupy.float32)
    with pytest.raises(ValueError, match=r"expected shape \(1\)"):
        v(x, cupy.empty(2, cupy.float32))
    with pytest.raises(ValueError, match="C-contiguous"):
        v(x[::2], cupy.empty(1, cupy.float32))
    with pytest.raises(ValueError, match="aligned"):
        v(x[1:], cupy.empty(1, cupy.float32))
