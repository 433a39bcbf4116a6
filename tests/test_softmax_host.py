"""Chapter 6 host side on a CPU: the (m, l) algebra, the dispatcher, every version's plan and configs, the
work split of the register versions (every element held by exactly one thread), and the ValueErrors of
validation. Every random draw is seeded; a failure names its seed."""
import dataclasses
import re

import numpy as np
import pytest

from kernels import softmax as S
from tests.fakes import FakeDeviceArray
from utils.version import Unsupported

SEED = 6
BF16 = S.BF16
DTYPES = list(S.dtypes())
DTYPE_IDS = [d.name for d in DTYPES]
TARGETS = [(8192, 1024), (8192, 4096), (4096, 16384), (1024, 65536), (128, 262144)]
LABELS = list(S.VERSIONS)
TUNABLE = [lab for lab in LABELS if lab in S.DEFAULTS]
CLUSTER_LABELS = ("v4_cluster_row", "v6_cluster_raw", "v9_stream", "v10_cluster_once", "v11_early_arrive")


def rng_for(*parts):
    """A generator seeded by SEED and the test's parameters; returns (rng, seed) for the failure message."""
    seed = (SEED * 1_000_003 + sum(map(ord, repr(parts)))) % 2**32
    return np.random.default_rng(seed), seed


def block_threads(label, cfg):
    """Threads per block a config asks for (from its field names)."""
    if label == "v2_warp_row":
        return 32 * S.V2_ROWS
    if label == "v4_cluster_row":
        return S.V4_THREADS
    return 32 * cfg.rows if "rows" in cfg._fields else cfg.threads


def problem(rows, cols, dtype):
    return S.shape_problem(rows, cols, dtype)


def test_cost_model():
    assert S.nbytes(8192, 1024) == 2 * 4 * 8192 * 1024
    assert S.nbytes(3, 5, itemsize=2) == 60
    assert S.traffic("v0_three_pass", 2, 3) == 4 * 4 * 6
    assert S.traffic("v1_online", 2, 3) == 3 * 4 * 6
    assert S.traffic("v2_warp_row", 2, 3) == S.nbytes(2, 3)


def test_reference_matches_the_definition():
    rng, seed = rng_for("reference")
    x = rng.standard_normal((7, 33)).astype(np.float32)
    e = np.exp(x.astype(np.float64))
    assert np.allclose(S.reference(x), e / e.sum(-1, keepdims=True), rtol=1e-12), f"seed {seed}"
    big = np.array([[1e4, 1e4 - 1, -1e4]], np.float32)
    y = S.reference(big)
    assert np.all(np.isfinite(y)) and y[0, 0] == pytest.approx(1 / (1 + np.exp(-1)))
    masked = np.array([[-np.inf] * 4, [0.0, -np.inf, 0.0, -np.inf]], np.float32)
    y = S.reference(masked)
    assert np.all(np.isnan(y[0])) and np.array_equal(y[1], [0.5, 0.0, 0.5, 0.0])


def test_merge_is_commutative_associative_with_identity():
    rng, seed = rng_for("merge")
    x = rng.standard_normal((5, 90)) * 30
    a, b, c = S.state(x[:, :20]), S.state(x[:, 20:50]), S.state(x[:, 50:])
    ab, ba = S.merge(a, b), S.merge(b, a)
    assert np.array_equal(ab[0], ba[0]) and np.array_equal(ab[1], ba[1]), f"seed {seed}"
    whole = S.state(x)
    for s in (S.merge(S.merge(a, b), c), S.merge(a, S.merge(b, c))):
        assert np.array_equal(s[0], whole[0]) and np.allclose(s[1], whole[1], rtol=1e-13), f"seed {seed}"
    empty = (np.full(5, -np.inf), np.zeros(5))
    e = S.merge(a, empty)
    assert np.array_equal(e[0], a[0]) and np.array_equal(e[1], a[1])
    ee = S.merge(empty, empty)
    assert np.all(np.isneginf(ee[0])) and np.all(ee[1] == 0)


# --- the dispatcher ------------------------------------------------------------------------------------

WINNERS = {("float32", 4096): (4, 256), ("bfloat16", 1024): (4, 4, 4, 4), ("bfloat16", 4096): (8, 64),
           ("bfloat16", 16384): (8, 256), ("float32", 65536): (16, 128, 8), ("float32", 262144): (16, 512, 8),
           ("bfloat16", 65536): (8, 256, 4), ("bfloat16", 262144): (8, 256, 16)}


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("rows,cols", TARGETS)
def test_dispatch_picks_the_one_read_version_that_fits(rows, cols, dtype):
    label = S.dispatch(rows, cols, dtype, has=lambda f: True)
    fp32 = dtype == np.float32
    expected = {1024: "v2_warp_row" if fp32 else "v8_warp_stream", 4096: "v5_block_raw",
                16384: "v3_block_row" if fp32 else "v5_block_raw",
                65536: "v10_cluster_once", 262144: "v10_cluster_once"}[cols]
    assert label == expected
    v, p = S.VERSIONS[label], problem(rows, cols, dtype)
    if (dtype.name, cols) in WINNERS:        # the default instances are the tuning runs' winners
        assert tuple(v.default(p)) == WINNERS[dtype.name, cols]
    (ln,) = v.launches(p)
    assert ln.kernel in v.source.name_expressions
    assert ln.threads % 32 == 0 and ln.threads <= 1024


def test_dispatch_falls_back_to_two_reads():
    every = lambda f: True
    assert S.dispatch(4, 262145, np.float32, every) == "v1_online"          # longer than a cluster holds
    assert S.dispatch(4, 1, np.float32, every) == "v2_warp_row"
    assert S.dispatch(S.MAX_GRID_Y, 20000, np.float32, every) == "v10_cluster_once"
    assert S.dispatch(S.MAX_GRID_Y + 1, 20000, np.float32, every) == "v1_online"   # rows on grid y
    (ln,) = S.VERSIONS["v1_online"].launches(problem(70000, 20000, np.float32))
    assert ln.grid == (70000, 1, 1)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_dispatch_without_clusters_never_picks_a_cluster_version(dtype):
    # an A100 (or BOOK_ARCH=sm_80): no clusters, so every row a cluster version would take goes to v1
    for cols in (1, 1024, 2048, 4096, 16384, 32768, 65536, 262144):
        label = S.dispatch(8, cols, dtype, has=lambda f: False)
        assert "clusters" not in S.VERSIONS[label].requires, (cols, label)
    assert S.dispatch(8, 65536, dtype, has=lambda f: False) == "v1_online"


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_dispatch_covers_every_row_length_with_a_supporting_version(dtype):
    for cols in (1, 1024, 1025, 2048, 2049, 16384, 16385, 32768, 32769, 65536, 262144, 262145):
        label = S.dispatch(5, cols, dtype, has=lambda f: True)
        assert S.VERSIONS[label].supports(problem(5, cols, dtype)), (cols, label)


# --- every version: names, sources, snippets, plans ------------------------------------------------------

def test_versions_are_numbered_in_order_with_their_parents_before_them():
    assert [S.VERSIONS[lab].number for lab in LABELS] == list(range(len(LABELS)))
    for lab in LABELS:
        chain = S.VERSIONS.lineage(lab)
        assert chain[0].label == "v0_three_pass" and [v.number for v in chain] == sorted(v.number for v in chain)


@pytest.mark.parametrize("label", LABELS)
def test_each_version_has_its_own_file_kernels_and_snippet(label):
    from utils.show import snippets
    v = S.VERSIONS[label]
    assert v.source.file == f"softmax/v{v.number:02d}_{v.idea}.cu"
    assert [src for src in S.VERSIONS.sources()].count(v.source) == 1, "one .cu per version"
    text = v.source.path.read_text()
    assert text.startswith(f"// v{v.number:02d}_{v.idea}.cu"), "a header comment naming the file"
    assert v.snippet in snippets(text)
    kernels = set(re.findall(r"\b(softmax_v\d+_\w+)\s*\(", text))
    assert kernels and all(k.startswith(v.name) for k in kernels), kernels
    assert all(n.startswith(v.name) for n in v.source.name_expressions)


@pytest.mark.parametrize("label", [lab for lab in LABELS if S.VERSIONS[lab].parent])
def test_each_version_shows_as_a_diff_against_its_parent(label):
    from utils.show import snippet_diff
    v = S.VERSIONS[label]
    parent = S.VERSIONS[v.parent]
    diff = snippet_diff(parent.source.file, parent.snippet, v.source.file, v.snippet)
    assert diff.count("\n+") >= 1 and diff.count("\n-") >= 1


def test_shared_headers_hold_the_snippets_the_chapter_shows():
    from utils.paths import KERNELS
    from utils.show import snippets
    expect = {"chunks.cuh": "softmax_chunks", "registers.cuh": "softmax_registers", "raw.cuh": "softmax_raw",
              "cluster_merge.cuh": "softmax_cluster_merge", "exp_once.cuh": "softmax_exp_once"}
    for file, name in expect.items():
        assert name in snippets((KERNELS / "softmax" / file).read_text()), file


def test_v11_logic_is_only_in_v11():
    # the split exit barrier (v11) must not appear in the code earlier versions display
    from utils.paths import KERNELS
    for path in (KERNELS / "softmax").iterdir():
        if path.name != "v11_early_arrive.cu":
            text = path.read_text()
            assert "EARLY_ARRIVE" not in text and "cluster_arrive_relaxed" not in text, path.name


@pytest.mark.parametrize("label", LABELS)
def test_cluster_versions_declare_that_they_need_clusters(label):
    src = S.VERSIONS[label].source
    uses_clusters = "__cluster_dims__" in src.path.read_text()
    assert uses_clusters == (label in CLUSTER_LABELS)
    assert ("clusters" in S.VERSIONS[label].requires) == uses_clusters


def test_launch_constants_match_the_source():
    for label, name in (("v0_three_pass", "V0_THREADS"), ("v1_online", "V1_THREADS"),
                        ("v2_warp_row", "V2_ROWS"), ("v4_cluster_row", "V4_THREADS")):
        assert f"constexpr int {name} = {getattr(S, name)};" in S.VERSIONS[label].source.path.read_text()


@pytest.mark.parametrize("label", LABELS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_every_plan_names_an_instantiated_kernel(dtype, label):
    v = S.VERSIONS[label]
    for cols in (1, 7, 33, 1000, 1024, 1025, 2048, 4097, 16384, 16385, 65536, 131073, 262144):
        p = problem(3, cols, dtype)
        if not v.supports(p):
            assert v.configs and cols > S.max_cols(label, dtype), f"{label} refuses cols={cols}"
            with pytest.raises(Unsupported, match="holds at most"):
                v.launches(p)
            continue
        for ln in v.launches(p):
            assert ln.kernel in v.source.name_expressions, ln.kernel
            if label in S.CLUSTER_ROW_VERSIONS:
                assert ln.grid == (ln.cluster, 3, 1) and ln.cluster == v.default(p).cluster


@pytest.mark.parametrize("label", TUNABLE)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_every_config_is_instantiated_and_holds_its_rows(dtype, label):
    v = S.VERSIONS[label]
    caps = [S.capacity(label, c, dtype) for c in S.DEFAULTS[label][dtype.name]]
    assert caps == sorted(caps), f"{label}: the defaults must grow in capacity"
    for cfg in v.all_configs(problem(1, 1, dtype)):
        assert cfg._fields == v.default(problem(1, 1, dtype))._fields, "named configs"
        cap = S.capacity(label, cfg, dtype)
        for cols in (1, cap - 1, cap):
            (ln,) = v.launches(problem(3, max(cols, 1), dtype), cfg)
            assert ln.kernel in v.source.name_expressions
            assert ln.block == (block_threads(label, cfg), 1, 1)
            assert ln.cluster == getattr(cfg, "cluster", 1)
        with pytest.raises(Unsupported, match="holds at most"):
            v.launches(problem(3, cap + 1, dtype), cfg)
    with pytest.raises(ValueError, match="not instantiated"):
        v.launches(problem(3, 100, dtype), (3, 96, 5, 7)[:len(v.default(problem(1, 1, dtype)))])


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_v11_runs_on_v10s_instances_with_v10s_launches(dtype):
    v10, v11 = S.VERSIONS["v10_cluster_once"], S.VERSIONS["v11_early_arrive"]
    assert v11.all_configs(problem(1, 1, dtype)) == v10.all_configs(problem(1, 1, dtype))
    for cfg in v10.all_configs(problem(1, 1, dtype)):
        for cols in (1, S.capacity("v10_cluster_once", cfg, dtype)):
            (a,) = v10.launches(problem(3, cols, dtype), cfg)
            (b,) = v11.launches(problem(3, cols, dtype), cfg)
            assert b == dataclasses.replace(a, kernel=a.kernel.replace("v10_cluster_once", "v11_early_arrive"))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_v8_walks_every_row_once(dtype):
    # warp w of the grid takes rows w, w + G, ... (G = grid x rows warps): every row has exactly one warp
    # and no warp walks more than rows_per_warp rows
    v = S.VERSIONS["v8_warp_stream"]
    for cfg in v.all_configs(problem(1, 1, dtype)):
        for rows in (1, 5, 7, 8191, 8192, 8193):
            (ln,) = v.launches(problem(rows, 100, dtype), cfg)
            g = ln.grid[0] * cfg.rows
            walked = [list(range(w, rows, g)) for w in range(g)]
            assert sorted(r for rs in walked for r in rs) == list(range(rows))
            assert max(map(len, walked)) <= cfg.rows_per_warp


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_v9_is_persistent_and_fits_shared_memory(dtype):
    # one cluster per row at most, lowered at bind time to what fits at once; each CTA's double buffer
    # within the 227 KiB a block may have; clusters of at most 16
    v = S.VERSIONS["v9_stream"]
    for cfg in v.all_configs(problem(1, 1, dtype)):
        assert S.stream_smem(cfg) <= 227 * 1024 and cfg.cluster in (1, 2, 4, 8, 16) and cfg.chunks <= 8
        for rows in (1, 37, 199, 4096):
            (ln,) = v.launches(problem(rows, S.capacity("v9_stream", cfg, dtype), dtype), cfg)
            assert ln.persistent and ln.cluster == cfg.cluster and ln.grid == (rows * cfg.cluster, 1, 1)
            assert ln.smem == 2 * 16 * cfg.chunks * cfg.threads
    (ln,) = v.launches(problem(128, 262144, np.float32))
    assert ln.cluster == 16 and ln.block == (512, 1, 1) and ln.smem == 128 * 1024


# --- the work split, mirrored in NumPy -------------------------------------------------------------------

REGISTER_LABELS = [lab for lab in TUNABLE]


@pytest.mark.parametrize("label", REGISTER_LABELS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_register_versions_hold_every_element_exactly_once(dtype, label):
    for cols in (1, 7, 33, 1000, 1024, 2048, 4097, 16384, 20000, 65536, 262144):
        if not S.VERSIONS[label].supports(problem(1, cols, dtype)):
            continue
        idx = S.thread_elements(label, cols, dtype)
        held = idx[idx >= 0]
        assert np.array_equal(np.sort(held), np.arange(cols)), f"{label} cols={cols}"
        w = S.vec(dtype)       # chunk-aligned vector accesses: each thread's elements in runs of VEC from c * VEC
        first = idx.reshape(idx.shape[0], -1, w)[..., 0]
        assert np.all((first[first >= 0] % w) == 0)


def test_v2_warp_accesses_are_contiguous_per_instruction():
    # load j of a warp: lanes 0..31 read chunks 32 j + lane: 512 contiguous bytes
    idx = S.thread_elements("v2_warp_row", 1024, np.float32)           # [32, 32]
    for j in range(idx.shape[1] // 4):
        assert np.array_equal(np.diff(idx[:, 4 * j]), np.full(31, 4))


@pytest.mark.parametrize("label", REGISTER_LABELS)
@pytest.mark.parametrize("shape", [(3, 7), (2, 33), (2, 1000), (1, 1), (2, 4097)])
def test_simulated_algorithm_matches_the_reference(shape, label):
    if not S.VERSIONS[label].supports(problem(*shape, np.float32)):
        pytest.skip("row too long for this version")
    rng, seed = rng_for(label, shape)
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    assert np.allclose(S.simulate(label, x), S.reference(x), rtol=1e-12, atol=1e-300), f"seed {seed}"


@pytest.mark.parametrize("label", REGISTER_LABELS)
def test_simulated_algorithm_on_masked_rows_and_large_logits(label):
    x = np.zeros((3, 70), np.float32)
    x[0] = -np.inf                                       # fully masked: NaN, as torch
    x[1, :] = -np.inf
    x[1, 65] = 2.0                                       # one survivor, held by a late thread
    x[2] = np.linspace(-1e4, 1e4, 70).astype(np.float32)   # large logits
    y = S.simulate(label, x)
    assert np.all(np.isnan(y[0]))
    assert y[1, 65] == 1.0 and np.all(np.delete(y[1], 65) == 0)
    assert np.allclose(y[2], S.reference(x)[2], rtol=1e-12, atol=0)


# --- validation ------------------------------------------------------------------------------------------

BAD = [
    (np.zeros((4, 4), np.float32), FakeDeviceArray((4, 4), np.float32), "expected a CUDA device array"),
    (FakeDeviceArray((4, 4), np.float64), FakeDeviceArray((4, 4), np.float64), "expected dtype float32"),
    (FakeDeviceArray((16,), np.float32), FakeDeviceArray((16,), np.float32), "expected 2 dimensions"),
    (FakeDeviceArray((0, 4), np.float32), FakeDeviceArray((0, 4), np.float32), "at least one row"),
    (FakeDeviceArray((4, 6), np.float32), FakeDeviceArray((6, 4), np.float32), r"expected shape \(4, 6\)"),
    (FakeDeviceArray((4, 8), np.float32), FakeDeviceArray((4, 8), np.float16), "expected dtype float32"),
    (FakeDeviceArray((4, 6), np.float32, strides=(4, 16)), FakeDeviceArray((4, 6), np.float32), "C-contiguous"),
    (FakeDeviceArray((4, 6), np.float32), FakeDeviceArray((4, 6), np.float32, ptr=0x10004), "aligned"),
    (FakeDeviceArray((2**16, 2**15), np.float32), FakeDeviceArray((2**16, 2**15), np.float32), r"2\*\*31"),
]


@pytest.mark.parametrize("label", LABELS)
@pytest.mark.parametrize("x,y,msg", BAD, ids=[b[2] for b in BAD])
def test_validation_rejects_bad_arguments(x, y, msg, label):
    with pytest.raises(ValueError, match=msg):
        S.VERSIONS[label].validate(x, y)


def test_plans_refuse_rows_too_long_or_too_many():
    x = FakeDeviceArray((2, 4096), np.float32)
    p = S.VERSIONS["v2_warp_row"].validate(x, FakeDeviceArray((2, 4096), np.float32))
    with pytest.raises(Unsupported, match="at most 1024"):
        S.VERSIONS["v2_warp_row"].launches(p)
    x = FakeDeviceArray((70000, 20000), np.float32)
    p = S.VERSIONS["v4_cluster_row"].validate(x, FakeDeviceArray((70000, 20000), np.float32))
    with pytest.raises(Unsupported, match="grid y"):
        S.VERSIONS["v4_cluster_row"].launches(p)
    assert S.VERSIONS["v1_online"].supports(p)


def test_validated_problem_carries_the_arrays_into_the_plan():
    x, y = FakeDeviceArray((37, 1000), np.float32), FakeDeviceArray((37, 1000), np.float32)
    p = S.problem(x, y)
    assert (p.rows, p.cols, p.out) == (37, 1000, y)
    (ln,) = S.VERSIONS["v3_block_row"].launches(p)
    assert ln.args[:2] == (x, y) and ln.args[2] == 1000 and ln.args[2].dtype == np.int32
    launches = S.VERSIONS["v0_three_pass"].launches(p)
    m, l = launches[1].args[1], launches[1].args[2]
    assert launches[0].args[1] is m and launches[2].args[1:3] == (m, l) and m is not l


# --- what a version keeps resident (ptxas registers through utils.occupancy) ------------------------------

def test_raw_registers_fit_the_occupancy_they_are_tuned_for():
    # v7 bf16 (4, 8, 8) must fit 8 blocks of 256 threads (64 rows per SM: all of 8192 x 1024 at once); the
    # 128-thread v6 blocks of 16 chunks 5 blocks (160 KiB of row per SM); the 16-block clusters 2 or 4;
    # v8 the blocks per SM its grid was sized for (one wave on 132 SMs)
    pytest.importorskip("ml_dtypes")
    from utils.arrays import ceil_div

    def resident(label, dtype, cfg, rows, cols):
        r = S.resident(label, problem(rows, cols, dtype), cfg)
        return r.blocks, r.bytes_per_sm

    assert resident("v7_warp_raw", BF16, (4, 8, 8), 8192, 1024) == (8, 8 * 8 * 2048)
    assert resident("v6_cluster_raw", np.float32, (16, 128, 8), 1024, 65536) == (5, 160 * 1024)
    assert resident("v6_cluster_raw", np.float32, (16, 256, 16), 128, 262144) == (2, 128 * 1024)
    assert resident("v6_cluster_raw", BF16, (8, 256, 16), 128, 262144) == (4, 128 * 1024)
    for dtype in DTYPES:
        for cfg in S.all_configs("v8_warp_stream", dtype):
            blocks = resident("v8_warp_stream", dtype, cfg, 8192, 1024)[0]
            assert blocks >= cfg.min_blocks, (cfg, blocks)
            assert ceil_div(8192, cfg.rows * cfg.rows_per_warp) <= 132 * blocks, "one wave on an H200"


def test_v11_arrives_relaxed_once_and_waits_after_the_stores():
    # the PTX of v11: one relaxed arrive more than v10 and one full arrive fewer (the split exit barrier);
    # the wait after the last store
    from utils.build import KernelSource, ptx
    cfg = (16, 128, 8)

    def body(label):
        v = S.VERSIONS[label]
        text = ptx(KernelSource(v.source.file, name_expressions=(S.kname(v.name, np.float32, *cfg),)))
        return re.search(r"\.entry \w+\((.*?)\n}\n", text, re.DOTALL).group(1)

    v10, v11 = body("v10_cluster_once"), body("v11_early_arrive")
    assert v10.count("barrier.cluster.arrive.relaxed") == 0
    assert v11.count("barrier.cluster.arrive.relaxed.aligned") == 1
    arrives = lambda b: len(re.findall(r"barrier\.cluster\.arrive(?:\.aligned)?;", b))
    waits = lambda b: b.count("barrier.cluster.wait")
    assert (arrives(v10), waits(v10)) == (2, 2) and (arrives(v11), waits(v11)) == (1, 2)
    assert v11.rindex("barrier.cluster.wait") > v11.rindex("st.global")


# --- what chapter 6's notebook asks of the package on the host --------------------------------------------

@pytest.mark.parametrize("label", ["v5_block_raw", "v6_cluster_raw"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_every_extra_instance_fits_one_chapter_shape(dtype, label):
    # the notebook re-times each extra on the first chapter shape it holds within a factor 2, in its own
    # dtype only: an extra is instantiated for one dtype (the other's configs do not list it)
    v = S.VERSIONS[label]
    for cfg in S.EXTRAS[label][dtype.name]:
        cap = S.capacity(label, cfg, dtype)
        shape = next((s for s in TARGETS if s[1] <= cap < 2 * s[1]), None)
        assert shape is not None, (label, cfg, cap)
        assert v.supports(problem(*shape, dtype), cfg), (label, cfg, shape)


@pytest.mark.parametrize("label", TUNABLE)
def test_a_recorded_config_reads_back_as_the_named_config(label):
    # the ladder records a config as the dict of its fields (a plain tuple given to it as a list)
    cfg = S.VERSIONS[label].default(problem(8, 1000, np.float32))
    assert S.config_of(label, dict(cfg._asdict())) == cfg and type(S.config_of(label, dict(cfg._asdict()))) is type(cfg)
    assert S.config_of(label, list(cfg)) == cfg and S.config_of(label, tuple(cfg))._fields == cfg._fields


@pytest.mark.parametrize("label", LABELS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_every_plan_gives_every_row_to_some_block(dtype, label):
    # a warp version's grid x warps per block x rows per warp, a block version's grid x, a cluster version's
    # grid y must cover the rows; a persistent grid (v9) needs one cluster at least and none beyond the rows
    v = S.VERSIONS[label]
    for rows in (1, 7, 37, 199, 8193):
        p = problem(rows, 1000, dtype)
        for cfg in (v.all_configs(p) or (None,)):
            if cfg is not None and not v.supports(p, cfg):
                continue
            for ln in v.launches(p, cfg):
                if label in S.WARP_VERSIONS:
                    per_block = ln.threads // 32 * getattr(S.config_of(label, cfg or v.default(p)), "rows_per_warp", 1)
                    assert ln.grid[0] * per_block >= rows > (ln.grid[0] - 1) * per_block, (cfg, rows, ln.grid)
                elif label in S.CLUSTER_ROW_VERSIONS:
                    assert ln.grid[1] == rows, (cfg, rows, ln.grid)
                elif label == "v9_stream":
                    assert 1 <= ln.grid[0] // ln.cluster <= rows and ln.persistent
                else:
                    assert ln.grid[0] == rows, (cfg, rows, ln.grid)


# --- softmax(): the dispatcher's choice planned and loaded once per shape -----------------------------------

@pytest.fixture
def recorded_launches(monkeypatch):
    """softmax() on a CPU: fake arrays (out= given, so cupy is only imported), no GPU checks, and kernels
    that record their loads and launches. Returns (loads, launches); the dispatch table starts and ends empty."""
    import sys
    import types

    import utils.gpu
    from utils.build import KernelSource
    monkeypatch.setitem(sys.modules, "cupy", sys.modules.get("cupy") or types.ModuleType("cupy"))
    monkeypatch.setattr(utils.gpu, "require_gpu", lambda: None)
    monkeypatch.setattr(utils.gpu, "require", lambda *features, needed_by="": None)
    loads, launches = [], []

    def launchable(src, name, cluster=1, dynamic_smem=0):
        loads.append(name)
        return lambda grid, block, args, shared_mem=0: launches.append((name, grid, block, args, shared_mem))

    monkeypatch.setattr(KernelSource, "launchable", launchable)
    S.forget_dispatched()
    yield loads, launches
    S.forget_dispatched()


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_softmax_plans_once_per_shape_and_launches_each_calls_arrays(recorded_launches, dtype):
    loads, launches = recorded_launches
    for n, (rows, cols) in enumerate(TARGETS):
        for i in range(3):                      # three pairs of arrays of one shape
            ptr = 0x1000000 * (1 + 8 * n + 2 * i)
            x = FakeDeviceArray((rows, cols), dtype, ptr=ptr)
            y = FakeDeviceArray((rows, cols), dtype, ptr=ptr + 0x800000)
            assert S.softmax(x, out=y) is y
            (ln,) = S.VERSIONS[S.dispatch(rows, cols, dtype)].launches(S.problem(x, y))
            assert launches[-1] == (ln.kernel, ln.grid, ln.block, ln.args, ln.smem), (rows, cols, i)
            assert launches[-1][3][:2] == (x, y)
        assert len(loads) == n + 1, (rows, cols, loads)   # one kernel load per shape, not per call
    S.forget_dispatched()
    x = FakeDeviceArray(TARGETS[0], dtype)
    S.softmax(x, out=FakeDeviceArray(TARGETS[0], dtype, ptr=0x20000))
    assert len(loads) == len(TARGETS) + 1                # forgotten: planned and loaded again


def test_softmax_validates_every_call(recorded_launches):
    x = FakeDeviceArray((37, 1000), np.float32)
    S.softmax(x, out=FakeDeviceArray((37, 1000), np.float32, ptr=0x20000))
    with pytest.raises(ValueError, match=r"expected shape \(37, 1000\)"):
        S.softmax(x, out=FakeDeviceArray((1000, 37), np.float32, ptr=0x20000))
    with pytest.raises(ValueError, match="aligned"):
        S.softmax(x, out=FakeDeviceArray((37, 1000), np.float32, ptr=0x20004))


def test_softmax_leaves_plans_with_workspaces_to_the_version(recorded_launches, monkeypatch):
    # v0 allocates its m and l per bind: not a plan to keep with slots for the arrays
    monkeypatch.setattr(S, "dispatch", lambda rows, cols, dtype, has=None: "v0_three_pass")
    x, y = FakeDeviceArray((37, 1000), np.float32), FakeDeviceArray((37, 1000), np.float32, ptr=0x20000)
    assert S.dispatched(S.problem(x, y)) == ("v0_three_pass", None)
