"""Chapter 5 host side on a CPU: cost model, launch geometry, error bounds, launcher validation, and the
kernels' orders of summation simulated in NumPy (fp32), checked against their bounds."""
import math

import ml_dtypes
import numpy as np
import pytest

from kernels import reduction as R
from tests.test_build_show_ops import FakeDeviceArray

BF16 = np.dtype(ml_dtypes.bfloat16)


def test_cost_model_counts_the_input_once():
    assert R.nbytes(1 << 28) == 1 << 30
    assert R.nbytes(37, itemsize=2) == 74
    assert R.flops(1) == 0 and R.flops(10) == 9


def test_reference_in_float64(rng):
    x = (rng.standard_normal(1000) + 1).astype(np.float32)
    s, a = R.reference(x)
    assert s == pytest.approx(float(x.astype(np.float64).sum()), rel=1e-15)
    assert a == pytest.approx(float(np.abs(x.astype(np.float64)).sum()), rel=1e-15)
    xb = x.astype(BF16)
    sb, _ = R.reference(xb)
    assert sb == pytest.approx(float(xb.astype(np.float64).sum()), rel=1e-15)


@pytest.mark.parametrize("n", [1, 37, 199, 256, 257, (1 << 20) + 3, 1 << 28])
def test_tree_passes_end_in_one_block(n):
    g = R.tree_passes(n)
    assert g[-1] == 1 and g[0] == R.ceil_div(n, 256)
    for a, b in zip(g, g[1:]):
        assert b == R.ceil_div(a, 256)
    assert len(R.tree_passes(1 << 28)) == 4


@pytest.mark.parametrize("dtype", [np.float32, BF16])
@pytest.mark.parametrize("n", [1, 7, 37, 199, (1 << 20) + 3, 1 << 28])
def test_vec_grid(n, dtype):
    for c in (1, 2, 4, 8):
        g = R.vec_grid(n, dtype, 132, 8, c)
        assert 1 <= g <= 132 * 8 + c and g % c == 0
    assert R.vec_grid(1 << 28, np.float32, 132) == 132 * 8
    assert R.vec_grid(37, np.float32, 132) == 1


def test_bounds_grow_with_depth():
    n = 1 << 28
    assert R.depth("v1_interleaved", n) == 40
    d5 = R.depth("v5_lastblock", n)
    assert 250 < d5 < 300       # 249 chunks per thread lane + 2 x 10 levels + a few
    assert R.gamma(d5) < 2e-5
    assert R.error_bound("v0_atomic", 1 << 24, 1.0) == pytest.approx(8 * 4096 * 2.0 ** -24)
    assert R.error_bound("v0_atomic", 4, 1.0) == pytest.approx(R.gamma(3))
    assert R.depth("v4_vec", n, dtype=BF16) > R.depth("v4_vec", n)
    with pytest.raises(KeyError):
        R.depth("v9", 10)


def test_check_sum():
    assert R.check_sum(1.0, 1.0, 0.0) == 0.0
    with pytest.raises(AssertionError, match="NaN|nan"):
        R.check_sum(float("nan"), 1.0, 1.0)
    with pytest.raises(AssertionError, match="exceeds the bound"):
        R.check_sum(1.1, 1.0, 0.05)


def simulate_vec(x: np.ndarray, g: int, cluster: int = 1) -> np.float32:
    """The v4-v6 order of additions in fp32: per-thread float4 lanes over strided 16-byte chunks, the
    horizontal sum, the tail, block_sum's butterflies, cluster combine, then the partials in index order."""
    f = np.float32
    e = 16 // x.dtype.itemsize
    xf = x.astype(np.float32)                      # exact for bf16
    n = x.size
    n16 = n // e
    G = g * 256
    chunks = xf[: n16 * e].reshape(n16, e) if n16 else np.zeros((0, e), np.float32)
    per_thread = np.zeros(G, np.float32)
    for t in range(G):
        acc = np.zeros(4, np.float32)
        for i in range(t, n16, G):                 # the unrolled loop adds in the same order
            c = chunks[i]
            if e == 4:
                acc = (acc + c).astype(f)
            else:
                acc = (acc + (c[0::2] + c[1::2]).astype(f)).astype(f)
        s = f(f(acc[0] + acc[1]) + f(acc[2] + acc[3]))
        tail = n16 * e + t
        if tail < n:
            s = f(s + xf[tail])
        per_thread[t] = s

    def warp_sum(v):                               # butterfly: every lane ends with the same value
        v = v.copy()
        for off in (16, 8, 4, 2, 1):
            v = (v + v[np.arange(32) ^ off]).astype(f)
        return v[0]

    def block_sum(v):
        totals = np.array([warp_sum(v[w * 32:(w + 1) * 32]) for w in range(8)], np.float32)
        return warp_sum(np.concatenate([totals, np.zeros(24, np.float32)]))

    blocks = np.array([block_sum(per_thread[b * 256:(b + 1) * 256]) for b in range(g)], np.float32)
    parts = []
    for c0 in range(0, g, cluster):
        acc = f(0)
        for q in range(cluster):
            acc = f(acc + blocks[c0 + q])
        parts.append(acc if cluster > 1 else blocks[c0])
    parts = np.array(parts, np.float32)
    lanes = np.zeros(256, np.float32)
    for t in range(256):
        for i in range(t, parts.size, 256):
            lanes[t] = f(lanes[t] + parts[i])
    return block_sum(lanes)


@pytest.mark.parametrize("dtype", [np.float32, BF16])
@pytest.mark.parametrize("n,sms,cluster", [(1, 132, 1), (37, 132, 1), (199, 132, 2), (5003, 2, 1),
                                           (70001, 1, 4), (40000, 3, 2)])
def test_vec_order_covers_every_element_within_the_bound(n, sms, cluster, dtype, rng):
    x = (rng.standard_normal(n) + 1).astype(np.float32).astype(dtype)
    g = R.vec_grid(n, dtype, sms, 8, cluster)
    got = simulate_vec(x, g, cluster)
    ref, sabs = R.reference(x)
    version = "v6_cluster" if cluster > 1 else "v5_lastblock"
    bound = R.error_bound(version, n, sabs, dtype=dtype, sms=sms, cluster=cluster if cluster > 1 else R.CLUSTER)
    R.check_sum(got, ref, bound, name=f"simulated {version} n={n}")
    # and every element counted exactly once: integers sum exactly
    ones = np.ones(n, np.float32).astype(dtype)
    assert simulate_vec(ones, g, cluster) == n


def test_sequential_fp32_sum_stalls_at_2_24():
    # why v0 is not only slow: fp32 cannot add 1 to 2**24
    s = np.float32(2 ** 24)
    assert s + np.float32(1) == s


def test_versions_are_numbered_in_order_and_named_after_their_kernels():
    labels = list(R.VERSIONS)
    assert [int(lbl.split("_")[0][1:]) for lbl in labels] == list(range(len(labels)))
    for lbl, v in R.VERSIONS.items():
        assert v.kernel == "reduce_" + lbl
    assert R.BEST in R.VERSIONS and set(R.BF16_VERSIONS) <= set(R.VERSIONS)


def test_every_version_has_a_snippet_and_a_kernel():
    from utils.show import snippets
    text = R.SOURCE.path.read_text()
    names = snippets(text)
    for lbl in R.VERSIONS:
        assert f"reduce_v{int(lbl.split('_')[0][1:])}" in names
    for k in ["reduce_v4_vec_bf16", "reduce_v4_finish", "reduce_v5_lastblock_bf16"] + \
             [f"reduce_v6_cluster{s}_c{c}" for s in ("", "_bf16") for c in R.CLUSTER_SIZES]:
        assert k in text or f"reduce_v6_cluster{'_bf16' if 'bf16' in k else ''}_c##C" in text


def test_kernels_fit_eight_blocks_per_sm():
    rep = R.SOURCE.ptxas()
    for name in ("reduce_v4_vec", "reduce_v4_vec_bf16", "reduce_v5_lastblock", "reduce_v5_lastblock_bf16",
                 "reduce_v6_cluster_c4", "reduce_v6_cluster_bf16_c4"):
        assert rep[name]["registers"] <= 32, (name, rep[name])


@pytest.mark.parametrize("x,out,msg", [
    (np.zeros(4, np.float32), FakeDeviceArray((1,), np.float32), "expected a CUDA device array"),
    (FakeDeviceArray((4,), np.float64), FakeDeviceArray((1,), np.float32), "expected dtype"),
    (FakeDeviceArray((4, 4), np.float32), FakeDeviceArray((1,), np.float32), "expected 1 dimensions"),
    (FakeDeviceArray((0,), np.float32), FakeDeviceArray((1,), np.float32), "at least one element"),
    (FakeDeviceArray((8,), np.float32, strides=(8,)), FakeDeviceArray((1,), np.float32), "C-contiguous"),
    (FakeDeviceArray((8,), np.float32, ptr=0x10004), FakeDeviceArray((1,), np.float32), "aligned"),
    (FakeDeviceArray((8,), np.float32), FakeDeviceArray((2,), np.float32), r"expected shape \(1\)"),
    (FakeDeviceArray((8,), np.float32), FakeDeviceArray((1,), np.float64), "expected dtype float32"),
])
def test_launchers_reject_bad_arguments(x, out, msg):
    for v in R.VERSIONS.values():
        with pytest.raises(ValueError, match=msg):
            v.launch(x, out)


def test_bf16_only_where_supported():
    x, out = FakeDeviceArray((8,), BF16), FakeDeviceArray((1,), np.float32)
    for lbl, v in R.VERSIONS.items():
        if lbl not in R.BF16_VERSIONS:
            with pytest.raises(ValueError, match="expected dtype float32, got bfloat16"):
                v.launch(x, out)


def test_cluster_size_is_checked():
    with pytest.raises(ValueError, match="cluster"):
        R.launch_v6(FakeDeviceArray((8,), np.float32), FakeDeviceArray((1,), np.float32), cluster=3)


def test_bound_is_meaningful_at_the_chapter_size():
    n = 1 << 28
    # normal data with mean 1: sum |x| is about 1.17 n, the sum about n
    rel = R.error_bound("v5_lastblock", n, 1.17 * n) / n
    assert rel < 3e-5
    assert R.error_bound("v0_atomic", n, 1.17 * n) / n > 1e-3
    assert math.isinf(R.gamma(1 << 25)) or R.gamma(1 << 25) > 1
