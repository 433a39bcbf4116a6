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


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("n", SIZES)
def test_every_version_within_its_bound(n, dtype):
    from kernels import reduction as R
    from utils.check import poisoned
    from utils.gpu import device_summary
    x = _data(n, dtype)
    ref, sabs = R.reference(x)
    from utils.gpu import supports
    for label, v in R.VERSIONS.items():
        if dtype == "bfloat16" and label not in R.BF16_VERSIONS:
            continue
        if label == "v6_cluster" and not supports("clusters"):
            continue
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
