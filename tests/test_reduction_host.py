"""Chapter 5 host side on a CPU: cost model, plans, error bounds, argument validation, and the kernels'
orders of summation simulated in NumPy (fp32), checked against their bounds."""
import itertools
import re

import numpy as np
import pytest

from kernels import reduction as R
from tests.fakes import FakeDeviceArray
from utils.version import Unsupported, Workspace

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = np.dtype(ml_dtypes.bfloat16)
SEED = 20260501
LABELS = list(R.VERSIONS)


def fake_problem(n, dtype=np.float32, sms=132):
    return R.problem(FakeDeviceArray((n,), dtype), FakeDeviceArray((1,), np.float32), sms=sms)


def test_cost_model_counts_the_input_once():
    assert R.nbytes(1 << 28) == 1 << 30
    assert R.nbytes(37, itemsize=2) == 74
    assert R.flops(1) == 0 and R.flops(10) == 9


def test_reference_in_float64():
    rng = np.random.default_rng(SEED)
    x = (rng.standard_normal(1000) + 1).astype(np.float32)
    s, a = R.reference(x)
    assert s == pytest.approx(float(x.astype(np.float64).sum()), rel=1e-15), f"seed {SEED}"
    assert a == pytest.approx(float(np.abs(x.astype(np.float64)).sum()), rel=1e-15), f"seed {SEED}"
    xb = x.astype(BF16)
    sb, _ = R.reference(xb)
    assert sb == pytest.approx(float(xb.astype(np.float64).sum()), rel=1e-15), f"seed {SEED}"


@pytest.mark.parametrize("n", [1, 37, 199, 256, 257, (1 << 20) + 3, 1 << 28])
def test_tree_passes_end_in_one_block(n):
    g = R.tree_passes(n)
    assert g[-1] == 1 and g[0] == -(-n // 256)
    for a, b in itertools.pairwise(g):
        assert b == -(-a // 256)
    assert len(R.tree_passes(1 << 28)) == 4


@pytest.mark.parametrize("dtype", [np.float32, BF16])
@pytest.mark.parametrize("n", [1, 7, 37, 199, (1 << 20) + 3, 1 << 28])
def test_vec_grid(n, dtype):
    for c in (1, 2, 4, 8):
        g = R.vec_grid(n, dtype, 132, 8, c)
        assert 1 <= g <= 132 * 8 + c and g % c == 0
    assert R.vec_grid(1 << 28, np.float32, 132) == 132 * 8
    assert R.vec_grid(37, np.float32, 132) == 1


# --- plans ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("label", LABELS)
def test_plan_launches_kernels_of_its_own_source(label):
    v = R.VERSIONS[label]
    text = v.source.path.read_text()
    for dtype in (np.float32, BF16):
        p = fake_problem((1 << 20) + 3, dtype)
        if not v.supports(p):
            continue
        for cfg in v.all_configs(p) or (None,):
            for ln in v.launches(p, cfg):
                # a plain extern "C" name, or one instantiated by a macro (reduce_v6_cluster_c##C)
                stem = re.sub(r"_c\d+$", "_c##C", ln.kernel)
                assert re.search(rf"\b{re.escape(ln.kernel)}\(", text) or stem + "(" in text, (label, ln.kernel)
                assert ln.block == ((1, 1, 1) if ln.kernel == "reduce_v0_zero" else (R.THREADS, 1, 1))


@pytest.mark.parametrize("label", ["v0_atomic", "v1_interleaved", "v2_sequential", "v3_shuffle"])
def test_one_element_per_thread_versions_take_fp32_only(label):
    v = R.VERSIONS[label]
    assert v.supports(fake_problem(37))
    with pytest.raises(Unsupported, match="float32 only"):
        v.launches(fake_problem(37, BF16))
    assert v.why_not(fake_problem(256 * (2**31 - 1) + 1)) is not None     # more blocks than a grid holds


@pytest.mark.parametrize("label", ["v1_interleaved", "v2_sequential", "v3_shuffle"])
def test_tree_plan_chains_each_pass_into_the_next(label):
    p = fake_problem((1 << 20) + 3)
    launches = R.VERSIONS[label].launches(p)
    assert [ln.grid[0] for ln in launches] == R.tree_passes(p.n)
    assert launches[0].args[0] is p.x and launches[-1].args[1] is p.out
    for a, b in itertools.pairwise(launches):
        assert b.args[0] is a.args[1]                 # the same Workspace object: bound to one buffer
        assert isinstance(a.args[1], Workspace) and a.args[1].shape[0] >= a.grid[0]
        assert int(b.args[2]) == a.grid[0]            # the next pass sums exactly the partials written


def test_v0_zeroes_the_output_before_the_atomics():
    p = fake_problem(1000)
    zero, atomic = R.VERSIONS["v0_atomic"].launches(p)
    assert zero.kernel == "reduce_v0_zero" and zero.args == (p.out,)
    assert atomic.grid[0] * R.THREADS >= 1000 and atomic.args[1] is p.out


@pytest.mark.parametrize("label", ["v4_vec", "v5_lastblock", "v6_cluster"])
def test_vec_plans_follow_the_config(label):
    v = R.VERSIONS[label]
    p = fake_problem(1 << 28, sms=96)             # 96 x any config: a whole number of clusters
    for cfg in v.all_configs(p):
        launches = v.launches(p, cfg)
        c = getattr(cfg, "cluster", 1)
        assert launches[0].grid[0] == 96 * cfg.blocks_per_sm and launches[0].cluster == c
        partial = launches[0].args[1]
        assert isinstance(partial, Workspace) and partial.shape == (launches[0].grid[0] // c,)
    assert v.default(p).blocks_per_sm == R.BLOCKS_PER_SM
    with pytest.raises(ValueError, match="not instantiated"):
        v.launches(p, R.ClusterGrid(3, 8) if label == "v6_cluster" else R.VecGrid(7))


def test_v4_second_launch_sums_the_partials_of_the_first():
    p = fake_problem(1 << 28, sms=132)
    vec, finish = R.VERSIONS["v4_vec"].launches(p)
    assert finish.args[0] is vec.args[1] and int(finish.args[2]) == vec.grid[0] and finish.grid == (1, 1, 1)


@pytest.mark.parametrize("label", ["v5_lastblock", "v6_cluster"])
def test_ticket_counter_is_zeroed_once_not_every_launch(label):
    (ln,) = R.VERSIONS[label].launches(fake_problem(1 << 20))
    counter = ln.args[2]
    assert counter.dtype == np.uint32 and counter.fill == 0 and not counter.every_launch


def test_only_v6_needs_clusters_and_sits_in_its_own_file():
    for label, v in R.VERSIONS.items():
        assert v.requires == (("clusters",) if label == "v6_cluster" else ()), label
    assert "__cluster_dims__" not in R.SOURCE.path.read_text()
    assert "__cluster_dims__" in R.CLUSTER_SOURCE.path.read_text()


@pytest.mark.parametrize("label", LABELS)
def test_versions_are_named_numbered_and_have_their_snippet(label):
    from utils.show import snippets
    v = R.VERSIONS[label]
    assert v.name == "reduce_" + label and v.snippet in snippets(v.source.path.read_text())
    assert v.number == LABELS.index(label)
    assert v.parent is None if v.number == 0 else v.parent == LABELS[v.number - 1]


# --- validation ----------------------------------------------------------------------------------------

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
def test_problem_rejects_bad_arguments(x, out, msg):
    with pytest.raises(ValueError, match=msg):
        R.problem(x, out, sms=132)


def test_problem_plans_for_the_h200_without_a_gpu():
    from utils.gpu import has_gpu
    p = R.problem(FakeDeviceArray((8,), np.float32), FakeDeviceArray((1,), np.float32))
    if not has_gpu():
        assert p.sms == 132


# --- error bounds --------------------------------------------------------------------------------------

def test_bounds_grow_with_depth():
    n = 1 << 28
    assert R.depth("v1_interleaved", n) == 40
    d5 = R.depth("v5_lastblock", n)
    assert 250 < d5 < 300       # 249 chunks per thread lane + 2 x 10 levels + a few
    assert R.gamma(d5) < 2e-5
    assert R.error_bound("v0_atomic", 4, 1.0) == pytest.approx(R.gamma(3))
    assert R.depth("v4_vec", n, dtype=BF16) > R.depth("v4_vec", n)
    assert R.depth("v4_vec", n, config=R.VecGrid(2)) > R.depth("v4_vec", n, config=R.VecGrid(32))
    assert R.depth("v6_cluster", n, config=R.ClusterGrid(8, 8)) > R.depth("v6_cluster", n, config=R.ClusterGrid(2, 8))
    with pytest.raises(KeyError):
        R.depth("v9", 10)


def test_v0_bound_falls_back_to_the_probabilistic_one_where_the_worst_case_says_nothing():
    # At n = 2**24 the worst case gamma_{n-1} is void (n u >= 1), so the bound must be the probabilistic
    # lambda sqrt(n) u sum|x| of Higham and Mary, lambda = 8.
    n = 1 << 24
    assert R.gamma(R.depth("v0_atomic", n)) >= 1       # a relative error of 100% or more: no information
    assert R.error_bound("v0_atomic", n, 1.0) == pytest.approx(8 * 4096 * 2.0 ** -24)
    # and where the worst case is tighter (small n), the worst case is taken
    assert R.error_bound("v0_atomic", 10, 1.0) == pytest.approx(R.gamma(9))


def test_check_sum():
    assert R.check_sum(1.0, 1.0, 0.0) == 0.0
    with pytest.raises(AssertionError, match="NaN|nan"):
        R.check_sum(float("nan"), 1.0, 1.0)
    with pytest.raises(AssertionError, match="exceeds the bound"):
        R.check_sum(1.1, 1.0, 0.05)


def test_bound_is_meaningful_at_the_chapter_size():
    n = 1 << 28
    # normal data with mean 1: sum |x| is about 1.17 n, the sum about n
    rel = R.error_bound("v5_lastblock", n, 1.17 * n) / n
    assert rel < 3e-5
    assert R.error_bound("v0_atomic", n, 1.17 * n) / n > 1e-3


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
def test_vec_order_covers_every_element_within_the_bound(n, sms, cluster, dtype):
    seed = SEED + n
    x = (np.random.default_rng(seed).standard_normal(n) + 1).astype(np.float32).astype(dtype)
    label = "v6_cluster" if cluster > 1 else "v5_lastblock"
    config = R.ClusterGrid(cluster, 8) if cluster > 1 else R.VecGrid(8)
    (ln,) = R.VERSIONS[label].launches(fake_problem(n, dtype, sms), config)
    got = simulate_vec(x, ln.grid[0], cluster)
    ref, sabs = R.reference(x)
    bound = R.error_bound(label, n, sabs, dtype=dtype, sms=sms, config=config)
    R.check_sum(got, ref, bound, name=f"simulated {label} n={n} (seed {seed})")
    # and every element counted exactly once: integers sum exactly
    ones = np.ones(n, np.float32).astype(dtype)
    assert simulate_vec(ones, ln.grid[0], cluster) == n


@pytest.mark.parametrize("source", ["SOURCE", "CLUSTER_SOURCE"])
def test_vec_kernels_fit_eight_blocks_per_sm(source):
    rep = getattr(R, source).ptxas()
    names = [k for k in rep if re.match(r"reduce_v[456]_", k) and "finish" not in k]
    assert names
    for name in names:
        assert rep[name]["registers"] <= 32, (name, rep[name])
