"""Chapter 7 host side on a CPU: references, the float32 numerics (cancellation, two-pass, Welford and
Chan's merge), the cost model, the row layouts and the kernels' index map simulated in NumPy, the
dispatcher, and the launchers' ValueErrors."""
import numpy as np
import pytest

from kernels import layernorm as L
from tests.fakes import FakeDeviceArray
from utils.arrays import bf16

SEED = 7    # every random draw of this module; failures name it


def seeded(salt: int = 0):
    return np.random.default_rng(SEED + salt)


# --- references ------------------------------------------------------------------------------------

def test_references_normalize_rows():
    x = seeded().standard_normal((5, 37)).astype(np.float32) * 3 + 2
    w, b = np.ones(37, np.float32), np.zeros(37, np.float32)
    y = L.layer_norm_ref(x, w, b, eps=0.0)
    assert np.allclose(y.mean(-1), 0, atol=1e-12) and np.allclose(y.var(-1), 1, atol=1e-10)
    r = L.rms_norm_ref(x, w, eps=0.0)
    assert np.allclose((r ** 2).mean(-1), 1, atol=1e-10)
    w2 = seeded().standard_normal(37).astype(np.float32)
    assert np.allclose(L.rms_norm_ref(x, w2), L.rms_norm_ref(x, w) * w2)


# --- numerics in float32 ---------------------------------------------------------------------------

def test_naive_variance_cancels_for_a_large_mean():
    x = (1e4 + seeded().standard_normal(2048)).astype(np.float32)
    true = float(np.var(x.astype(np.float64)))
    assert abs(L.var_naive(x) - true) > 0.5 * true          # wrong in the leading digit (or worse)
    assert abs(L.var_twopass(x) - true) < 1e-2 * true
    n, _mean, m2 = L.welford_state(x)
    assert n == 2048 and abs(m2 / n - true) < 1e-2 * true


def test_shifted_variance_survives_a_large_mean():
    """layernorm_v6's sums shifted by the first value: the cancellation is against (mean - x_0)^2,
    about var, not mean^2 (1e8 var here), so it is as accurate as two-pass to within a small factor."""
    x = (1e4 + seeded().standard_normal(4096)).astype(np.float32)
    true = float(np.var(x.astype(np.float64)))
    assert abs(L.var_shifted(x) - true) < 1e-2 * true
    assert abs(L.var_naive(x) - true) > 0.5 * true
    # the bound's worst case: x_0 an outlier, (mean - K)^2 ~ n var; a shift of 0 is the naive formula
    assert abs(L.var_shifted(x, shift=0.0) - true) > 0.5 * true
    y = x.copy()
    y[0] = np.float32(1e4 + 64.0)                  # (mean - K)^2 ~ 4096 var: ~12 bits of 24 lost
    true_y = float(np.var(y.astype(np.float64)))
    assert abs(L.var_shifted(y) - true_y) < 1e-2 * true_y


def test_naive_variance_is_fine_for_centered_data():
    x = seeded().standard_normal(2048).astype(np.float32)
    true = float(np.var(x.astype(np.float64)))
    assert abs(L.var_naive(x) - true) < 1e-4 * true


@pytest.mark.parametrize("parts", [1, 2, 7, 32])
def test_chan_merge_matches_the_whole(parts):
    x = (50 + 3 * seeded().standard_normal(999)).astype(np.float32)
    n, mean, m2 = L.welford_tree(x, parts)
    x64 = x.astype(np.float64)
    assert n == 999
    assert abs(mean - x64.mean()) < 1e-4
    assert abs(m2 / n - x64.var()) < 1e-3 * x64.var()


@pytest.mark.parametrize("parts", [1, 2, 4, 8])
def test_twopass_chan_survives_a_large_mean(parts):
    x = (1e4 + seeded().standard_normal(4096)).astype(np.float32)
    n, _mean, m2 = L.twopass_chan(x, parts)
    x64 = x.astype(np.float64)
    assert n == 4096 and abs(m2 / n - x64.var()) < 1e-2 * x64.var()


def test_merge_with_an_empty_state_is_the_identity():
    s = L.welford_state(seeded().standard_normal(10).astype(np.float32))
    empty = (0.0, 0.0, 0.0)
    assert L.welford_merge(s, empty) == pytest.approx(s)
    assert L.welford_merge(empty, s) == pytest.approx(s)
    assert L.welford_merge(empty, empty) == (0.0, 0.0, 0.0)


def test_merge_of_two_single_values():
    n, mean, m2 = L.welford_merge((1, 2.0, 0.0), (1, 4.0, 0.0))
    assert (n, mean, m2) == (2, 3.0, 2.0)


# --- cost model ------------------------------------------------------------------------------------

def test_cost_model_counts_x_y_and_the_weights_once():
    assert L.nbytes(8192, 1024, 4, "layernorm") == 4 * (2 * 8192 * 1024 + 2 * 1024)
    assert L.nbytes(128, 262144, 2, "rmsnorm") == 2 * (2 * 128 * 262144 + 262144)
    assert L.flops(3, 5, "rmsnorm") == 60
    with pytest.raises(KeyError):
        L.nbytes(1, 1, 4, "softmax")


# --- layouts and the index map ---------------------------------------------------------------------

TARGET_SHAPES = [(8192, 1024), (8192, 4096), (4096, 16384), (1024, 65536), (128, 262144)]


def test_layouts_grow_and_hold_the_target_rows():
    caps = [lay.capacity for lay in L.LAYOUTS]
    assert caps == sorted(caps) and len(set(caps)) == len(caps)
    for lay in L.LAYOUTS:
        assert lay.items % 8 == 0 and lay.threads % lay.tpr == 0 and lay.threads <= 1024
        assert lay.tpr == 32 or lay.tpr == lay.threads
        assert lay.cluster in (1, 8) and (lay.cluster == 1 or lay.tpr == lay.threads)
    for rows, n in TARGET_SHAPES:
        lay = L.layout_for(n)
        assert lay.capacity == n                      # the target widths fill their layout exactly
    assert L.layout_for(1).capacity == 256 and L.layout_for(257).capacity == 1024
    with pytest.raises(ValueError, match="exceed"):
        L.layout_for(L.MAX_N + 1)


def test_tune_layouts_fill_a_target_width_and_fit_the_registers():
    widths = {n for _, n in TARGET_SHAPES}
    for lay in L.TUNE_LAYOUTS:
        assert lay.capacity in widths and lay.items % 8 == 0 and lay.threads <= 1024
        assert lay.tpr == 32 or lay.tpr == lay.threads
        assert lay.cluster in (1, 2, 4, 8) and lay.threads * lay.items <= 32768
    assert set(L.LAYOUTS) <= set(L.FAST_LAYOUTS) and len(set(L.FAST_LAYOUTS)) == len(L.FAST_LAYOUTS)


@pytest.mark.parametrize("vec", [4, 8])
@pytest.mark.parametrize("lay", L.TUNE_LAYOUTS, ids=lambda lay: lay.name)
def test_tune_layouts_cover_each_column_once(lay, vec):
    for n in (lay.capacity, lay.capacity - 8 * 37):
        cols = simulate_columns(n, lay, vec)
        assert cols.size == n and np.array_equal(np.sort(cols), np.arange(n))


@pytest.mark.parametrize("rows", [1, 3, 4, 5, 37, 199, 8192])
def test_grid_covers_every_row(rows):
    for lay in L.FAST_LAYOUTS:
        g = L.grid_of(rows, lay)
        assert g % lay.cluster == 0
        assert (g // lay.cluster) * lay.rows_per_block >= rows > (g // lay.cluster - 1) * lay.rows_per_block


def simulate_columns(n: int, lay: L.Layout, vec: int) -> np.ndarray:
    """Columns touched by norm_rows for one row: col = r * TPR * ITEMS + (j * TPR + t) * VEC + k."""
    r, t, j, k = np.meshgrid(np.arange(lay.cluster), np.arange(lay.tpr), np.arange(lay.items // vec),
                             np.arange(vec), indexing="ij")
    col0 = r * lay.tpr * lay.items + t * vec
    first = col0 + j * lay.tpr * vec               # the access's first column decides validity
    col = first + k
    return col[first < n]


@pytest.mark.parametrize("vec", [1, 4, 8])
@pytest.mark.parametrize("n", [1, 8, 37, 199, 256, 1000, 1024, 4096, 4104, 16384, 40000, 65536, 262144])
def test_index_map_covers_each_column_once(n, vec):
    if n % vec:
        pytest.skip("vector versions need n % VEC == 0")
    lay = L.layout_for(n)
    cols = simulate_columns(n, lay, vec)
    assert cols.size == n and np.array_equal(np.sort(cols), np.arange(n))


def thread_columns(lay: L.Layout, vec: int, rank: int, thread: int) -> np.ndarray:
    """First column of each access j of one thread, as row_slice (norm_common.cuh) maps it:
    col0 = rank * TPR * ITEMS + (thread % TPR) * VEC, col(j) = col0 + j * TPR * VEC."""
    col0 = rank * lay.tpr * lay.items + (thread % lay.tpr) * vec
    return col0 + np.arange(lay.items // vec) * lay.tpr * vec


ROW_LAYOUTS = sorted({lay for b in L.BUILDS.values() for d in L.DTYPES for lay in b.layouts[d]},
                     key=lambda lay: (lay.capacity, lay.threads, lay.cluster))


@pytest.mark.parametrize("lay", ROW_LAYOUTS, ids=lambda lay: lay.name)
def test_valid_accesses_are_a_prefix_per_thread(lay):
    """v2's Welford update takes 1 / (i + 1) as a constant: a thread's valid accesses must be j = 0, 1, ...
    with no gap, on every instantiated layout and any width (a thread whose columns did not grow with j
    would skip one and count wrong)."""
    vec = 8 if lay.items % 8 == 0 else 1
    for n in (1, 37, lay.capacity // 3 + 5, lay.capacity - vec, lay.capacity):
        n -= n % vec
        for r in range(lay.cluster):
            for t in range(lay.threads):
                valid = list(thread_columns(lay, vec, r, t) < n)
                assert valid == sorted(valid, reverse=True), (lay, n, r, t)


@pytest.mark.parametrize("lay", ROW_LAYOUTS, ids=lambda lay: lay.name)
def test_warp_accesses_are_contiguous(lay):
    """Each access j of a warp covers 32 * VEC consecutive columns (coalesced): the 32 lanes of every warp
    of the block map to consecutive slots of one row."""
    for vec in (1, 4, 8):
        for warp in range(lay.threads // 32):
            firsts = np.stack([thread_columns(lay, vec, 0, warp * 32 + lane) for lane in range(32)])
            assert np.array_equal(np.diff(firsts[:, 0]), np.full(31, vec)), (lay, vec, warp)
            assert lay.tpr % 32 == 0, lay


# --- versions, instantiations, dispatcher ------------------------------------------------------------

ALL = [(op, label) for op, reg in L.VERSIONS.items() for label in reg]


def F(shape, dtype=np.float32, **kw):
    return FakeDeviceArray(shape, dtype, **kw)


def arrays(op, rows, n, dtype=np.float32):
    """Fake x, w, (b,) y of one problem, in the order the op's versions take them."""
    x, w, y = F((rows, n), dtype), F((n,), dtype), F((rows, n), dtype)
    return (x, w, F((n,), dtype), y) if op == "layernorm" else (x, w, y)


@pytest.mark.parametrize("op,label", ALL)
def test_version_has_its_snippet_and_file(op, label):
    from utils.show import snippets
    v = L.VERSIONS[op][label]
    assert v.op == op and v.source.file.startswith("layernorm/v")
    assert v.snippet in snippets(v.source.path.read_text()), (v.name, v.snippet, v.source.file)
    assert f"{v.name}(" in v.source.path.read_text()


@pytest.mark.parametrize("op,label", ALL)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("shape", [(8192, 1024), (8192, 4096), (4096, 16384), (1024, 65536), (128, 262144),
                                   (37, 1000), (199, 1032), (3, 16392)])
def test_every_plan_launches_an_instantiated_kernel(op, label, dtype, shape):
    """The default plan of every version on the chapter's and the odd shapes names a kernel its source
    instantiates, on a grid that covers every row (or a persistent grid of whole clusters)."""
    v = L.VERSIONS[op][label]
    p = L.shape_problem(op, *shape, dtype)
    if not v.supports(p):
        assert "multiple of" in v.why_not(p) and shape[1] % L.VEC16[dtype]
        return
    (ln,) = v.launches(p)
    src = ln.source or v.source
    assert ln.kernel in src.name_expressions, (ln.kernel, src.file)
    assert ln.grid[0] % ln.cluster == 0 and ln.block[0] <= 1024
    if ln.persistent:
        assert 1 <= ln.grid[0] // ln.cluster <= shape[0]
    elif label != "v0_naive":
        lay = v.resolve_config(p)
        assert (ln.grid[0] // lay.cluster) * lay.rows_per_block >= shape[0] and lay.capacity >= shape[1]
    assert ("clusters" in src.requires) == (ln.cluster > 1 or src.file.endswith(L.CLUSTER_ONLY_FILES))


def test_sources_split_cluster_instantiations_from_plain_ones():
    """Every instantiation with CLUSTER > 1 sits in a source of its own (it needs sm_90), none twice."""
    seen = set()
    for src in L.sources():
        exprs = set(src.name_expressions)
        assert not exprs & seen
        seen |= exprs
        if src.file.endswith(L.CLUSTER_ONLY_FILES):
            continue
        clustered = {e.endswith((", 2>", ", 4>", ", 8>")) for e in exprs}
        assert len(clustered) == 1, src
    assert L.V2_SPILLING_SOURCE.spill_free is False and all(s.spill_free for s in L.sources()
                                                             if s is not L.V2_SPILLING_SOURCE)


def test_tuned_entries_are_what_the_versions_default_to():
    """TUNED names a version and layout per chapter width: the dispatcher picks them, the version's
    default on that problem is that layout, and the early-arrive twin times on the same layout."""
    for (op, dtype, n), (label, lay) in L.TUNED.items():
        dt = bf16() if dtype == "bfloat16" else np.float32
        assert L.pick(op, n, dt) == label and L.pick_layout(op, n, dt) == lay
        p = L.shape_problem(op, 128, n, dtype)
        v = L.VERSIONS[op][label]
        assert v.resolve_config(p) == lay and v.supports(p)
        for kernel, twin in L.EARLY_TWINS.items():
            if v.name in (kernel, twin):
                other = L.VERSIONS[op][(twin if v.name == kernel else kernel)]
                if lay in other.all_configs(p):          # the long rows: both on TUNED's layout
                    assert other.resolve_config(p) == lay
                else:                                    # shorter: the early version is not built there
                    assert n < 65536 and other.name == kernel


def test_pick():
    assert L.pick("layernorm", 4096, np.float32) == "v5_raw"           # TUNED
    assert L.pick("layernorm", 4104, np.float32) == "v4_ilp"           # not a chapter width
    assert L.pick("layernorm", 4098, np.float32) == "v1_twopass"
    assert L.pick("rmsnorm", 1000, np.float32) == "v3_ilp"
    assert L.pick_layout("rmsnorm", 1000, np.float32) == L.layout_for(1000)
    assert L.pick_layout("layernorm", 4098, np.float32) is None
    assert L.pick("rmsnorm", 1004, bf16()) == "v1_registers"
    assert L.pick("layernorm", L.MAX_N + 8, np.float32) == "v0_naive"
    with pytest.raises(ValueError, match="float32 or bfloat16"):
        L.pick("layernorm", 64, np.float64)


# --- validation --------------------------------------------------------------------------------------

@pytest.mark.parametrize("args,msg", [
    ((np.zeros((4, 8), np.float32), F((8,)), F((8,)), F((4, 8))), "expected a CUDA device array"),
    ((F((4, 8), np.float64), F((8,), np.float64), F((8,), np.float64), F((4, 8), np.float64)), "float32 or bfloat16"),
    ((F((32,)), F((32,)), F((32,)), F((32,))), "expected 2 dimensions"),
    ((F((0, 8)), F((8,)), F((8,)), F((0, 8))), "at least one row"),
    ((F((4, 8)), F((7,)), F((8,)), F((4, 8))), r"w: expected shape \(8\)"),
    ((F((4, 8)), F((8,)), F((8,), np.float64), F((4, 8))), "b: expected dtype float32"),
    ((F((4, 8)), F((8,)), F((8,)), F((8, 4))), r"y: expected shape \(4, 8\)"),
    ((F((4, 8), strides=(4, 16)), F((8,)), F((8,)), F((4, 8))), "C-contiguous"),
    ((F((4, 8)), F((8,)), F((8,)), F((4, 8), ptr=0x10004)), "aligned"),
    ((F((1, 2**24)), F((2**24,)), F((2**24,)), F((1, 2**24))), r"n below 2\*\*24"),
])
@pytest.mark.parametrize("label", list(L.LAYERNORM))
def test_layernorm_versions_reject_bad_arguments(label, args, msg):
    with pytest.raises(ValueError, match=msg):
        L.LAYERNORM[label].validate(*args)


@pytest.mark.parametrize("label", list(L.RMSNORM))
def test_rmsnorm_versions_reject_bad_arguments(label):
    v = L.RMSNORM[label]
    with pytest.raises(ValueError, match=r"w: expected shape \(8\)"):
        v.validate(F((4, 8)), F((9,)), F((4, 8)))
    with pytest.raises(ValueError, match="expected dtype float32"):
        v.validate(F((4, 8)), F((8,)), F((4, 8), np.float64))


def test_vector_versions_need_whole_vectors():
    from utils.version import Unsupported
    for op, label, n, dt, vec in (("layernorm", "v3_vec16", 10, np.float32, 4), ("layernorm", "v4_ilp", 10, np.float32, 4),
                                  ("rmsnorm", "v2_vec16", 12, bf16(), 8), ("rmsnorm", "v6_early_arrive", 12, bf16(), 8)):
        v = L.VERSIONS[op][label]
        with pytest.raises(Unsupported, match=f"multiple of {vec}"):
            v.launches(v.validate(*arrays(op, 4, n, dt)))


def test_layouts_are_checked():
    from utils.version import Unsupported
    p = L.shape_problem("layernorm", 2, 300, "float32")
    with pytest.raises(Unsupported, match="do not fit"):
        L.LAYERNORM["v1_twopass"].launches(p, L.LAYOUTS[0])
    with pytest.raises(ValueError, match="fixed layout"):
        L.LAYERNORM["v0_naive"].launches(p, L.LAYOUTS[0])
    with pytest.raises(ValueError, match="not instantiated"):
        L.LAYERNORM["v3_vec16"].launches(L.shape_problem("layernorm", 2, 1024, "float32"), L.TUNE_LAYOUTS[0])
    with pytest.raises(ValueError, match="not instantiated"):
        L.LAYERNORM["v8_early_arrive"].launches(p, L.RAW_LAYOUTS["float32"][1])
    with pytest.raises(ValueError, match="not instantiated"):
        L.LAYERNORM["v7_stream"].launches(p, L.LAYOUTS[0])
    too_long = L.shape_problem("rmsnorm", 2, L.MAX_N + 8, "float32")
    for label in ("v1_registers", "v4_raw", "v5_stream", "v6_early_arrive"):
        with pytest.raises(Unsupported, match="exceed|do not fit"):
            L.RMSNORM[label].launches(too_long)
    assert L.RMSNORM["v0_naive"].supports(too_long)


def test_cluster_layouts_are_unsupported_on_a_gpu_without_clusters(monkeypatch):
    import utils.gpu
    monkeypatch.setattr(utils.gpu, "has_gpu", lambda: True)
    monkeypatch.setattr(utils.gpu, "supports", lambda feature: feature != "clusters")
    long_row = L.shape_problem("layernorm", 4, 65536, "float32")
    short_row = L.shape_problem("layernorm", 4, 4096, "float32")
    for label in ("v1_twopass", "v5_raw", "v8_early_arrive"):
        assert "clusters" in L.LAYERNORM[label].why_not(long_row)
    assert L.LAYERNORM["v5_raw"].supports(short_row)
    assert L.LAYERNORM["v0_naive"].supports(long_row)


# --- the early-arrive versions (layernorm_v8_early_arrive, rmsnorm_v6_early_arrive) ----------------

@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_early_arrive_layouts(dtype):
    """Instantiated on (at least) every cluster layout TUNED names at 65536 and 262144, each of them a raw
    layout too (the twins run on it); the defaults grow up to MAX_N, so every width has one."""
    long_rows = {lay for (op, d, n), (_, lay) in L.TUNED.items() if d == dtype and n in (65536, 262144)}
    assert long_rows <= set(L.EARLY_ALL_LAYOUTS[dtype]) <= set(L.RAW_ALL_LAYOUTS[dtype])
    assert all(lay.cluster > 1 and lay.tpr == lay.threads for lay in L.EARLY_ALL_LAYOUTS[dtype])
    caps = [lay.capacity for lay in L.EARLY_LAYOUTS[dtype]]
    assert caps == sorted(caps) and caps[-1] == L.MAX_N


def test_early_arrive_kernels_split_the_exit_barrier():
    """In the PTX: the twin ends on a full cluster barrier (arrive + wait); the early-arrive kernel has one
    relaxed arrive, after its acquire DSMEM reads and before its stores, and its last wait after the
    stores."""
    import re

    from utils.build import ptx
    lay = L.Layout(256, 256, 64, 4)
    twins = {"layernorm_v8_early_arrive": L.V6_CLUSTER_SOURCE, "rmsnorm_v6_early_arrive": L.V5_CLUSTER_SOURCE}
    bodies = {}
    for src in (L.V8_SOURCE, *twins.values()):
        bodies.update({m.group(1): m.group(2)
                       for m in re.finditer(r"\.entry (\w+)\((.*?)\n}\n", ptx(src), re.DOTALL)})

    def body(kernel):
        (b,) = [b for k, b in bodies.items() if kernel in k and "Li256ELi256ELi64ELi4EEv" in k]
        return b
    full = re.compile(r"barrier\.cluster\.arrive(?:\.aligned)?;")
    assert lay in L.EARLY_ALL_LAYOUTS["bfloat16"]
    for kernel, twin in L.EARLY_TWINS.items():
        old, new = body(twin), body(kernel)
        assert len(full.findall(old)) == 2 and old.count("barrier.cluster.wait") == 2
        assert "relaxed" not in old and "ld.acquire" not in old
        assert len(full.findall(new)) == 1 and new.count("barrier.cluster.wait") == 2
        assert new.count("barrier.cluster.arrive.relaxed.aligned") == 1
        relaxed = new.index("barrier.cluster.arrive.relaxed")
        assert new.rindex("ld.acquire.cluster", 0, relaxed) < relaxed < new.index("st.global")
        assert new.rindex("barrier.cluster.wait") > new.rindex("st.global")


# --- the persistent streams (layernorm_v7_stream, rmsnorm_v5_stream) -------------------------------

def stream_columns(n: int, lay: L.Layout, vec: int) -> np.ndarray:
    """Columns a stream CTA writes: rank r's slice starts at chunk r * THREADS * NC; thread t holds chunks
    t + j * THREADS of it; chunk c covers columns c * VEC .. c * VEC + VEC - 1 (those below n)."""
    nc = lay.items // vec
    r, t, j, k = np.meshgrid(np.arange(lay.cluster), np.arange(lay.threads), np.arange(nc), np.arange(vec),
                             indexing="ij")
    col = ((r * lay.threads * nc + t + j * lay.threads) * vec + k).ravel()
    return col[col < n]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_stream_layouts(dtype):
    from utils.hardware import facts
    f = facts("H200")
    vec = L.VEC16[dtype]
    caps = [lay.capacity for lay in L.STREAM_LAYOUTS[dtype]]
    assert caps == sorted(caps) and caps[-1] == L.MAX_N == L.STREAM_MAX_N
    for lay in L.STREAM_ALL_LAYOUTS[dtype]:
        nc = lay.items // vec
        assert lay.items % vec == 0 and nc <= 8 and lay.tpr == lay.threads and lay.cluster in (1, 2, 4, 8, 16)
        assert L.stream_smem(lay, dtype) == 2 * 16 * nc * lay.threads <= f.smem_per_block_optin
        for n in (lay.capacity, lay.capacity - 3, lay.capacity // 3 + 5, 1):
            cols = stream_columns(n, lay, vec)
            assert cols.size == n and np.array_equal(np.sort(cols), np.arange(n))
        for rows in (1, 37, 199, 128, 8192):
            clusters = L.stream_clusters(rows, lay, dtype, f)
            assert 1 <= clusters <= rows
            assert clusters * lay.cluster <= f.sms * L.stream_ctas_per_sm(lay, dtype, f)


def test_stream_versions_take_any_width():
    # no multiple-of-VEC rule (rows that are not 16-byte multiples are gathered element by element)
    for op, label in (("layernorm", "v7_stream"), ("rmsnorm", "v5_stream")):
        p = L.shape_problem(op, 5, 1003, "bfloat16")
        (ln,) = L.VERSIONS[op][label].launches(p)
        assert ln.persistent and ln.smem == L.stream_smem(L.VERSIONS[op][label].resolve_config(p), "bfloat16")


# --- what the chapter shows of a timed launch: registers, spills, blocks per SM ------------------

@pytest.mark.parametrize("op,label", ALL)
def test_resources_of_the_timed_launch(op, label):
    """resources() plans the launch the chapter times, reads its ptxas report and turns it into blocks
    per SM (utils.occupancy, the H200's facts on a CPU)."""
    from utils.hardware import facts
    shape = (1024, 65536)
    r = L.resources(op, label, *shape, "bfloat16", facts("H200"))
    assert r is not None and r["registers"] > 0 and r["blocks_per_sm"] >= 1
    assert r["blocks_per_sm"] * r["launch"].threads <= 2048
    if label == "v0_naive":
        assert r["layout"] is None
    else:
        assert r["layout"] == L.VERSIONS[op][label].resolve_config(L.shape_problem(op, *shape, "bfloat16"))
    assert r["spills"] == (0, 0)


def test_resources_report_the_spilling_instance_and_skip_what_a_version_cannot_take():
    from utils.hardware import facts
    r = L.resources("layernorm", "v2_welford", 128, 262144, "bfloat16", facts("H200"))
    assert r["launch"].kernel in L.SPILLING and r["spills"][0] > 0
    assert L.resources("layernorm", "v3_vec16", 4, 1001, "float32") is None     # n % 4 != 0
    table = L.resource_table([("layernorm", "v3_vec16")], [(4, 1001), (8192, 1024)], ["float32"])
    assert len(table.rows) == 1 and table.rows[0][3] == "8192x1024"


# --- the record: every version's config lands in the JSON file ------------------------------------

class FillableFake(FakeDeviceArray):
    """A fake output the ladder can poison before a timing."""

    def fill(self, value):
        pass


CHAPTER_SHAPES = [(8192, 1024), (8192, 4096), (4096, 16384), (1024, 65536), (128, 262144)]


@pytest.mark.parametrize("op", list(L.VERSIONS))
def test_every_version_config_is_saved_in_the_json_record(op, tmp_path, monkeypatch):
    """utils.ladder's Ladder.time records each version's config (a Layout) in the entry and the Record
    saves the file as JSON: drive that path for every version on the chapter's shapes with the GPU parts
    (binding, timing) stubbed, and read the configs back from the file."""
    import json

    import utils.bench
    import utils.version
    from utils.ladder import Case, Ladder
    from utils.record import Record
    from utils.stats import Timing
    monkeypatch.setattr(utils.bench, "bench", lambda fn, **kw: Timing(1.0, 0.9, 1.1, 10))
    monkeypatch.setattr(utils.version.Version, "bind", lambda self, *a, config=None, **kw: lambda: None)
    bf16()                       # imports ml_dtypes, which gives NumPy the dtype name 'bfloat16'

    def make(shape, dtype, rng):
        args = arrays(op, *shape, dtype)
        return Case((*args[:-1], FillableFake(args[-1].shape, args[-1].dtype)), outputs=(len(args) - 1,))

    rec = Record("07-layernorm", gpu="cpu-test", root=tmp_path)
    lad = Ladder(rec, L.VERSIONS[op], shapes=CHAPTER_SHAPES, dtypes=["float32", "bfloat16"], make=make,
                 reference=lambda case: None, nbytes=lambda shape, dt: L.nbytes(*shape, np.dtype(dt).itemsize, op),
                 seed=SEED)
    timed = {label: lad.time(label) for label in L.VERSIONS[op]}
    saved = json.loads(rec.path.read_text())["entries"]
    assert len(saved) == sum(map(len, timed.values())) == len(rec.entries) > 0
    for e in saved:
        v = L.VERSIONS[op][e["impl"]]
        lay = v.resolve_config(L.shape_problem(op, *e["shape"], e["dtype"]))
        if lay is None:
            assert e["config"] is None and e["impl"] == "v0_naive"
        else:
            assert L.Layout(**e["config"]) == lay, (e["impl"], e["shape"], e["dtype"], e["config"])
