"""Every reduction version on fresh random data (mean 1, so the sum is well conditioned), poisoned
outputs, sizes that are not multiples of any block or vector width, within each version's error bound;
the single-pass versions bitwise reproducible."""
import numpy as np
import pytest

pytestmark = pytest.mark.gpu

SIZES = [1, 37, 199, 4099, (1 << 20) + 3]


def _data(n, dtype):
    import cupy
    import ml_dtypes
    x = cupy.random.standard_normal(n, dtype=cupy.float32) + 1
    return x if dtype == "float32" else x.astype(ml_dtypes.bfloat16)


def _runnable_versions(dtype):
    """(label, Version) of every version that takes ``dtype`` on this GPU (v6 needs clusters)."""
    from kernels import reduction as R
    from utils.gpu import supports
    for label, v in R.VERSIONS.items():
        if dtype == "bfloat16" and label not in R.BF16_VERSIONS:
            continue
        if label == "v6_cluster" and not supports("clusters"):
            continue
        yield label, v


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("n", SIZES)
def test_every_version_within_its_bound(n, dtype):
    from kernels import reduction as R
    from utils.check import poisoned
    from utils.gpu import device_summary
    x = _data(n, dtype)
    ref, sabs = R.reference(x)
    for label, v in _runnable_versions(dtype):
        out = poisoned((1,), np.float32)
        v.launch(x, out)
        bound = R.error_bound(label, n, sabs, dtype=x.dtype, sms=device_summary()["sms"])
        R.check_sum(float(out[0]), ref, bound, name=f"{label} {dtype} n={n}")


@pytest.mark.parametrize("cluster", [2, 4, 8])
def test_cluster_sizes(cluster):
    from kernels import reduction as R
    from utils.check import poisoned
    from utils.gpu import device_summary, supports
    if not supports("clusters"):
        pytest.skip("needs clusters (sm_90)")
    for n in (37, (1 << 20) + 3):
        x = _data(n, "float32")
        ref, sabs = R.reference(x)
        out = poisoned((1,), np.float32)
        R.launch_v6(x, out, cluster=cluster)
        bound = R.error_bound("v6_cluster", n, sabs, sms=device_summary()["sms"], cluster=cluster)
        R.check_sum(float(out[0]), ref, bound, name=f"v6 c{cluster} n={n}")


# Small non-negative integers: every partial sum is an integer below 2**24, so fp32 adds them exactly in
# any order and every version must return the exact total. A dropped, doubled or misplaced element
# (tail, grid-stride remainder, partials loop) shows as a wrong integer, however loose the error bound.
EXACT = [(1, 8), (37, 8), (4099, 8), ((1 << 20) + 3, 8), (3 * (1 << 22) + 5, 2)]


def _ints(n, high, dtype):
    import cupy
    import ml_dtypes
    k = cupy.random.randint(0, high, size=n, dtype=cupy.int32)
    exact = int(k.sum(dtype=cupy.int64))
    assert exact < 2**24
    x = k.astype(cupy.float32)
    return (x if dtype == "float32" else x.astype(ml_dtypes.bfloat16)), exact


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("n,high", EXACT)
def test_every_element_counted_exactly_once(n, high, dtype):
    from utils.check import poisoned
    x, exact = _ints(n, high, dtype)
    for label, v in _runnable_versions(dtype):
        out = poisoned((1,), np.float32)
        v.launch(x, out)
        got = float(out[0])
        assert got == exact, f"{label} {dtype} n={n}: got {got!r}, expected exactly {exact}"


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("blocks_per_sm", [1, 3, 32])
def test_grid_sizes_exact(blocks_per_sm, dtype):
    """Other grids than the default one wave: 1 and 3 blocks per SM (v6 rounds 396 blocks up to 400 for
    clusters of 8), 32 per SM (4 waves, more than 1024 partials: the 4-load loop of sum_partials)."""
    import functools

    from kernels import reduction as R
    from utils.check import poisoned
    from utils.gpu import supports
    n = 3 * (1 << 22) + 5
    x, exact = _ints(n, 2, dtype)
    launches = {"v4": functools.partial(R.launch_v4, blocks_per_sm=blocks_per_sm),
                "v5": functools.partial(R.launch_v5, blocks_per_sm=blocks_per_sm)}
    if supports("clusters"):
        for c in R.CLUSTER_SIZES:
            launches[f"v6 c{c}"] = functools.partial(R.launch_v6, cluster=c, blocks_per_sm=blocks_per_sm)
    for name, launch in launches.items():
        out = poisoned((1,), np.float32)
        launch(x, out)
        got = float(out[0])
        assert got == exact, f"{name} {dtype} {blocks_per_sm} blocks/SM: got {got!r}, expected exactly {exact}"


def test_single_pass_is_bitwise_reproducible_and_rearms():
    from kernels import reduction as R
    x = _data((1 << 24) + 5, "float32")
    from utils.gpu import supports
    for label in ("v4_vec", "v5_lastblock", "v6_cluster"):
        if label == "v6_cluster" and not supports("clusters"):
            continue
        bits = set()
        for _ in range(5):
            out = R.reduce_sum(x, label)
            bits.add(int(out.view(np.uint32)[0]))
        assert len(bits) == 1, f"{label}: {len(bits)} different results from the same input"


def test_counter_is_rearmed_between_sizes():
    from kernels import reduction as R
    for n in (5, 1 << 16, 3):
        x = _data(n, "float32")
        ref, sabs = R.reference(x)
        out = R.reduce_sum(x, "v5_lastblock")
        R.check_sum(float(out[0]), ref, R.error_bound("v5_lastblock", n, sabs), name=f"v5 n={n}")


def test_launchers_reject_bad_arguments():
    import cupy
    from kernels import reduction as R
    x = cupy.ones(64, cupy.float32)
    with pytest.raises(ValueError, match=r"expected shape \(1\)"):
        R.launch_v5(x, cupy.empty(2, cupy.float32))
    with pytest.raises(ValueError, match="C-contiguous"):
        R.launch_v5(x[::2], cupy.empty(1, cupy.float32))
    with pytest.raises(ValueError, match="aligned"):
        R.launch_v5(x[1:], cupy.empty(1, cupy.float32))
