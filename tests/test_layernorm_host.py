"""Chapter 7 host side on a CPU: references, the float32 numerics (cancellation, two-pass, Welford and
Chan's merge), the cost model, the row layouts and the kernels' index map simulated in NumPy, the
dispatcher, and the launchers' ValueErrors."""
import numpy as np
import pytest

from kernels import layernorm as L
from tests.test_build_show_ops import FakeDeviceArray


# --- references ------------------------------------------------------------------------------------

def test_references_normalize_rows(rng):
    x = rng.standard_normal((5, 37)).astype(np.float32) * 3 + 2
    w, b = np.ones(37, np.float32), np.zeros(37, np.float32)
    y = L.layer_norm_ref(x, w, b, eps=0.0)
    assert np.allclose(y.mean(-1), 0, atol=1e-12) and np.allclose(y.var(-1), 1, atol=1e-10)
    r = L.rms_norm_ref(x, w, eps=0.0)
    assert np.allclose((r ** 2).mean(-1), 1, atol=1e-10)
    w2 = rng.standard_normal(37).astype(np.float32)
    assert np.allclose(L.rms_norm_ref(x, w2), L.rms_norm_ref(x, w) * w2)


# --- numerics in float32 ---------------------------------------------------------------------------

def test_naive_variance_cancels_for_a_large_mean(rng):
    x = (1e4 + rng.standard_normal(2048)).astype(np.float32)
    true = float(np.var(x.astype(np.float64)))
    assert abs(L.var_naive(x) - true) > 0.5 * true          # wrong in the leading digit (or worse)
    assert abs(L.var_twopass(x) - true) < 1e-2 * true
    n, mean, m2 = L.welford_state(x)
    assert n == 2048 and abs(m2 / n - true) < 1e-2 * true


def test_shifted_variance_survives_a_large_mean(rng):
    """layernorm_v6's sums shifted by the first value: the cancellation is against (mean - x_0)^2,
    about var, not mean^2 (1e8 var here), so it is as accurate as two-pass to within a small factor."""
    x = (1e4 + rng.standard_normal(4096)).astype(np.float32)
    true = float(np.var(x.astype(np.float64)))
    assert abs(L.var_shifted(x) - true) < 1e-2 * true
    assert abs(L.var_naive(x) - true) > 0.5 * true
    # the bound's worst case: x_0 an outlier, (mean - K)^2 ~ n var; a shift of 0 is the naive formula
    assert abs(L.var_shifted(x, shift=0.0) - true) > 0.5 * true
    y = x.copy()
    y[0] = np.float32(1e4 + 64.0)                  # (mean - K)^2 ~ 4096 var: ~12 bits of 24 lost
    true_y = float(np.var(y.astype(np.float64)))
    assert abs(L.var_shifted(y) - true_y) < 1e-2 * true_y


def test_naive_variance_is_fine_for_centered_data(rng):
    x = rng.standard_normal(2048).astype(np.float32)
    true = float(np.var(x.astype(np.float64)))
    assert abs(L.var_naive(x) - true) < 1e-4 * true


@pytest.mark.parametrize("parts", [1, 2, 7, 32])
def test_chan_merge_matches_the_whole(parts, rng):
    x = (50 + 3 * rng.standard_normal(999)).astype(np.float32)
    n, mean, m2 = L.welford_tree(x, parts)
    x64 = x.astype(np.float64)
    assert n == 999
    assert abs(mean - x64.mean()) < 1e-4
    assert abs(m2 / n - x64.var()) < 1e-3 * x64.var()


@pytest.mark.parametrize("parts", [1, 2, 4, 8])
def test_twopass_chan_survives_a_large_mean(parts, rng):
    x = (1e4 + rng.standard_normal(4096)).astype(np.float32)
    n, mean, m2 = L.twopass_chan(x, parts)
    x64 = x.astype(np.float64)
    assert n == 4096 and abs(m2 / n - x64.var()) < 1e-2 * x64.var()


def test_merge_with_an_empty_state_is_the_identity(rng):
    s = L.welford_state(rng.standard_normal(10).astype(np.float32))
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


@pytest.mark.parametrize("vec", [1, 4, 8])
def test_valid_accesses_are_a_prefix_per_thread(vec):
    # the Welford update's constant 1 / (i + 1) relies on it
    for n in (37, 1000, 4104, 40000):
        if n % vec:
            continue
        lay = L.layout_for(n)
        for r in range(lay.cluster):
            for t in range(lay.tpr):
                valid = [r * lay.tpr * lay.items + (j * lay.tpr + t) * vec < n for j in range(lay.items // vec)]
                assert valid == sorted(valid, reverse=True)


def test_warp_accesses_are_contiguous():
    for lay in L.LAYOUTS:
        for vec in (1, 4, 8):
            cols = [(0 * lay.tpr + t) * vec for t in range(32)]
            assert np.array_equal(np.diff(cols), np.full(31, vec))


# --- versions, instantiations, dispatcher ------------------------------------------------------------

def test_versions_are_numbered_and_named_after_their_kernels():
    from utils.show import snippets
    names = snippets(L.SOURCE.path.read_text())
    for op, versions in L.VERSIONS.items():
        labels = list(versions)
        assert [int(lbl.split("_")[0][1:]) for lbl in labels] == list(range(len(labels)))
        for lbl, v in versions.items():
            assert v.kernel == f"{op}_{lbl}"
            assert f"{op}_{lbl.split('_')[0]}" in names


def test_every_launchable_kernel_is_instantiated():
    exprs = set(L.SOURCE.name_expressions) | set(L.SOURCE_SPILLING.name_expressions)
    assert not set(L.SOURCE.name_expressions) & set(L.SOURCE_SPILLING.name_expressions)
    for kernel in L.KERNELS:
        for dtype in L.DTYPES:
            for lay in L.LAYOUTS:
                assert L.name_expression(kernel, dtype, L._vec(kernel, dtype), lay) in exprs
    fast = set(L.SOURCE_FAST.name_expressions)
    for kernel in L.FAST_KERNELS:
        for dtype in L.DTYPES:
            for lay in L.FAST_LAYOUTS:
                assert L.name_expression(kernel, dtype, L._vec(kernel, dtype), lay) in fast
    assert not fast & exprs
    assert L.SOURCE_SPILLING.spill_free is False and L.SOURCE.spill_free is True and L.SOURCE_FAST.spill_free
    raw = set(L.SOURCE_RAW.name_expressions)
    for kernel in L.RAW_KERNELS:
        for dtype in L.DTYPES:
            for lay in L.RAW_ALL_LAYOUTS[dtype]:
                assert L.name_expression(kernel, dtype, L._vec(kernel, dtype), lay) in raw
    for kernel in L.EARLY_KERNELS:
        for dtype in L.DTYPES:
            for lay in L.EARLY_ALL_LAYOUTS[dtype]:
                assert L.name_expression(kernel, dtype, L._vec(kernel, dtype), lay) in raw
    assert not raw & (fast | exprs) and L.SOURCE_RAW.spill_free
    stream = set(L.SOURCE_STREAM.name_expressions)
    for kernel in L.STREAM_KERNELS:
        for dtype in L.DTYPES:
            for lay in L.STREAM_ALL_LAYOUTS[dtype]:
                assert L.stream_name_expression(kernel, dtype, lay) in stream
    assert not stream & (raw | fast | exprs) and L.SOURCE_STREAM.spill_free


def test_naive_kernels_read_one_value_at_a_time():
    """The v0 kernels are in no vector table (the first GPU batch failed on a KeyError here)."""
    for op in ("layernorm", "rmsnorm"):
        for dtype in L.DTYPES:
            assert L._vec(f"{op}_v0_naive", dtype) == 1
            assert L._vec(L.VERSIONS[op]["v1_twopass" if op == "layernorm" else "v1_registers"].kernel, dtype) == 1


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_raw_layouts(dtype):
    """Raw layouts: shortest first up to MAX_N, each a whole number of 16-byte chunks per thread, the
    tune extras filling a chapter width; every column covered once (same index map as norm_rows)."""
    vec = L.VEC16[dtype]
    caps = [lay.capacity for lay in L.RAW_LAYOUTS[dtype]]
    assert caps == sorted(caps) and caps[-1] == L.MAX_N
    widths = {n for _, n in TARGET_SHAPES}
    assert {lay.capacity for lay in L.RAW_TUNE_LAYOUTS[dtype]} <= widths
    assert len(set(L.RAW_ALL_LAYOUTS[dtype])) == len(L.RAW_ALL_LAYOUTS[dtype])
    for lay in L.RAW_ALL_LAYOUTS[dtype]:
        assert lay.items % vec == 0 and lay.cluster in (1, 2, 4, 8) and (lay.tpr == 32 or lay.tpr == lay.threads)
        for n in (lay.capacity, lay.capacity - vec * 37):
            if n > 0:
                cols = simulate_columns(n, lay, vec)
                assert cols.size == n and np.array_equal(np.sort(cols), np.arange(n))
    for n in (8, 1000, 4096, 65536, 262144):
        assert n <= L.raw_layout_for(n, dtype).capacity
    with pytest.raises(ValueError, match="exceed"):
        L.raw_layout_for(L.MAX_N + 8, dtype)


def test_tuned_entries_are_launchable():
    """Every TUNED (version, layout) names a version of its op and a layout instantiated for it."""
    for (op, dtype, n), (label, lay) in L.TUNED.items():
        kernel = L.VERSIONS[op][label].kernel
        allowed = (L.RAW_ALL_LAYOUTS[dtype] if kernel in L.RAW_KERNELS else
                   L.EARLY_ALL_LAYOUTS[dtype] if kernel in L.EARLY_KERNELS else
                   L.STREAM_ALL_LAYOUTS[dtype] if kernel in L.STREAM_KERNELS else L.FAST_LAYOUTS)
        assert lay in allowed and lay.capacity >= n and n % L.VEC16[dtype] == 0
        dt = L._bf16() if dtype == "bfloat16" else np.float32
        assert L.pick(op, n, dt) == label and L.pick_layout(op, n, dt) == lay
        assert L.layout_of(op, label, n, dt) == lay
        other = next(lbl for lbl in L.VERSIONS[op] if lbl != label)
        assert L.layout_of(op, other, n, dt) is None


def test_pick():
    assert L.pick("layernorm", 4096, np.float32) == "v5_raw"           # TUNED
    assert L.pick("layernorm", 4104, np.float32) == "v4_ilp"           # not a chapter width
    assert L.pick("layernorm", 4098, np.float32) == "v1_twopass"
    assert L.pick("rmsnorm", 1000, np.float32) == "v3_ilp"
    assert L.pick_layout("rmsnorm", 1000, np.float32) == L.layout_for(1000)
    assert L.pick_layout("layernorm", 4098, np.float32) is None
    assert L.pick("rmsnorm", 1004, L._bf16()) == "v1_registers"
    assert L.pick("layernorm", L.MAX_N + 8, np.float32) == "v0_naive"
    with pytest.raises(ValueError, match="float32 or bfloat16"):
        L.pick("layernorm", 64, np.float64)


# --- launcher validation -----------------------------------------------------------------------------

def F(shape, dtype=np.float32, **kw):
    return FakeDeviceArray(shape, dtype, **kw)


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
])
def test_layernorm_launchers_reject_bad_arguments(args, msg):
    for v in L.LN_VERSIONS.values():
        with pytest.raises(ValueError, match=msg):
            v.launch(*args)


def test_rmsnorm_launchers_reject_bad_arguments():
    for v in L.RMS_VERSIONS.values():
        with pytest.raises(ValueError, match=r"w: expected shape \(8\)"):
            v.launch(F((4, 8)), F((9,)), F((4, 8)))
        with pytest.raises(ValueError, match="expected dtype float32"):
            v.launch(F((4, 8)), F((8,)), F((4, 8), np.float64))


def test_vector_versions_need_whole_vectors():
    with pytest.raises(ValueError, match="multiple of 4"):
        L.LN_VERSIONS["v3_vec16"].launch(F((4, 10)), F((10,)), F((10,)), F((4, 10)))
    with pytest.raises(ValueError, match="multiple of 4"):
        L.LN_VERSIONS["v4_ilp"].launch(F((4, 10)), F((10,)), F((10,)), F((4, 10)))
    bf = L._bf16()
    with pytest.raises(ValueError, match="multiple of 8"):
        L.RMS_VERSIONS["v2_vec16"].launch(F((4, 12), bf), F((12,), bf), F((4, 12), bf))


def test_rows_beyond_the_layouts_are_refused():
    n = L.MAX_N + 8
    with pytest.raises(ValueError, match="exceed"):
        L.LN_VERSIONS["v2_welford"].launch(F((2, n)), F((n,)), F((n,)), F((2, n)))
    with pytest.raises(ValueError, match="do not fit"):
        L.LN_VERSIONS["v1_twopass"].launch(F((2, 300)), F((300,)), F((300,)), F((2, 300)), layout=L.LAYOUTS[0])
    with pytest.raises(ValueError, match="fixed layout"):
        L.LN_VERSIONS["v0_naive"].launch(F((2, 8)), F((8,)), F((8,)), F((2, 8)), layout=L.LAYOUTS[0])
    with pytest.raises(ValueError, match="not instantiated for layernorm_v3_vec16"):
        L.LN_VERSIONS["v3_vec16"].launch(F((2, 1024)), F((1024,)), F((1024,)), F((2, 1024)),
                                         layout=L.TUNE_LAYOUTS[0])
    with pytest.raises(ValueError, match="n below 2\\*\\*24"):
        L.LN_VERSIONS["v0_naive"].launch(F((1, 2**24)), F((2**24,)), F((2**24,)), F((1, 2**24)))


def test_bind_validates_before_returning_a_launcher():
    with pytest.raises(ValueError, match=r"w: expected shape \(8\)"):
        L.bind("layernorm", "v3_vec16", F((4, 8)), F((9,)), F((8,)), F((4, 8)))
    with pytest.raises(ValueError, match=r"y: expected shape \(4, 8\)"):
        L.bind("rmsnorm", "v1_registers", F((4, 8)), F((8,)), None, F((8, 4)))
    with pytest.raises(ValueError, match="fixed layout"):
        L.bind("rmsnorm", "v0_naive", F((4, 8)), F((8,)), None, F((4, 8)), layout=L.LAYOUTS[0])
    with pytest.raises(KeyError):
        L.bind("layernorm", "v9_missing", F((4, 8)), F((8,)), F((8,)), F((4, 8)))


# --- the early-arrive versions (layernorm_v8_early_arrive, rmsnorm_v6_early_arrive) ----------------

EARLY = {"layernorm": "v8_early_arrive", "rmsnorm": "v6_early_arrive"}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_early_arrive_layouts(dtype):
    """Instantiated on (at least) every cluster layout TUNED names at 65536 and 262144, each of them a raw
    layout too (the twins run on it); the defaults grow up to MAX_N, so every width has one."""
    long_rows = {lay for (op, d, n), (_, lay) in L.TUNED.items() if d == dtype and n in (65536, 262144)}
    assert long_rows <= set(L.EARLY_ALL_LAYOUTS[dtype]) <= set(L.RAW_ALL_LAYOUTS[dtype])
    assert len(set(L.EARLY_ALL_LAYOUTS[dtype])) == len(L.EARLY_ALL_LAYOUTS[dtype])
    assert all(lay.cluster > 1 and lay.tpr == lay.threads for lay in L.EARLY_ALL_LAYOUTS[dtype])
    caps = [lay.capacity for lay in L.EARLY_LAYOUTS[dtype]]
    assert caps == sorted(caps) and caps[-1] == L.MAX_N
    for n in (8, 1000, 65536, 65544, 262144):
        lay = L.raw_layout_for(n, dtype, L.EARLY_LAYOUTS)
        assert n <= lay.capacity and lay in L.EARLY_LAYOUTS[dtype]
    for kernel, twin in L.EARLY_TWINS.items():
        assert kernel in L.EARLY_KERNELS and twin in L.RAW_KERNELS and L._vec(kernel, dtype) == L.VEC16[dtype]


def test_early_arrive_versions_and_twins_time_on_one_layout():
    """The dispatcher picks the early-arrive versions on the long rows (65536, 262144: the fifth H200 tuning
    batch); there layout_of gives each twin (v6_shift / v4_raw) the same TUNED layout, so that the two time
    side by side. On the shorter widths the early versions are not picked and time on their default."""
    for (op, dtype, n), (label, lay) in L.TUNED.items():
        dt = L._bf16() if dtype == "bfloat16" else np.float32
        early = EARLY[op]
        twin = next(lbl for lbl, v in L.VERSIONS[op].items()
                    if v.kernel == L.EARLY_TWINS[L.VERSIONS[op][early].kernel])
        if n >= 65536:
            assert label == early and lay in L.EARLY_ALL_LAYOUTS[dtype]
            assert L.layout_of(op, early, n, dt) == lay and L.layout_of(op, twin, n, dt) == lay
        else:
            assert label != early and L.layout_of(op, early, n, dt) is None


def test_early_arrive_versions_take_only_their_layouts():
    with pytest.raises(ValueError, match="not instantiated for layernorm_v8_early_arrive"):
        L.LN_VERSIONS["v8_early_arrive"].launch(F((2, 1024)), F((1024,)), F((1024,)), F((2, 1024)),
                                                layout=L.RAW_LAYOUTS["float32"][1])
    with pytest.raises(ValueError, match="multiple of 8"):
        L.RMS_VERSIONS["v6_early_arrive"].launch(F((4, 12), L._bf16()), F((12,), L._bf16()), F((4, 12), L._bf16()))
    lay = L.EARLY_LAYOUTS["float32"][0]
    n = lay.capacity + 4
    with pytest.raises(ValueError, match="do not fit"):
        L.RMS_VERSIONS["v6_early_arrive"].launch(F((2, n)), F((n,)), F((2, n)), layout=lay)


def test_early_arrive_kernels_split_the_exit_barrier():
    """In the PTX: the twin ends on a full cluster barrier (arrive + wait); the early-arrive kernel has one
    relaxed arrive, after its acquire DSMEM reads and before its stores, and its last wait after the
    stores. A CLUSTER of 1 (no table instantiates it; built here only) has no cluster barrier at all."""
    import re
    from utils.build import KernelSource, ptx
    lay, lay1 = L.Layout(256, 256, 64, 4), L.Layout(256, 256, 64, 1)
    exprs = [L.name_expression(k, "bfloat16", 8, lay) for k in ("layernorm_v6_shift", "layernorm_v8_early_arrive",
                                                              "rmsnorm_v4_raw", "rmsnorm_v6_early_arrive")]
    exprs += [L.name_expression(k, "bfloat16", 8, lay1) for k in L.EARLY_KERNELS]
    text = ptx(KernelSource("layernorm.cu", name_expressions=tuple(exprs)))
    bodies = {m.group(1): m.group(2) for m in re.finditer(r"\.entry (\w+)\((.*?)\n}\n", text, re.S)}

    def body(kernel, cluster):           # the mangled name ends its template arguments with CLUSTER
        (b,) = [b for k, b in bodies.items() if kernel in k and f"Li{cluster}EEv" in k]
        return b
    full = re.compile(r"barrier\.cluster\.arrive(?:\.aligned)?;")
    for kernel, twin in L.EARLY_TWINS.items():
        old, new = body(twin, 4), body(kernel, 4)
        assert len(full.findall(old)) == 2 and old.count("barrier.cluster.wait") == 2
        assert "relaxed" not in old and "ld.acquire" not in old
        assert len(full.findall(new)) == 1 and new.count("barrier.cluster.wait") == 2
        assert new.count("barrier.cluster.arrive.relaxed.aligned") == 1
        relaxed = new.index("barrier.cluster.arrive.relaxed")
        assert new.rindex("ld.acquire.cluster", 0, relaxed) < relaxed < new.index("st.global")
        assert new.rindex("barrier.cluster.wait") > new.rindex("st.global")
        assert "barrier.cluster" not in body(kernel, 1)


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
    vec = L.VEC16[dtype]
    caps = [lay.capacity for lay in L.STREAM_LAYOUTS[dtype]]
    assert caps == sorted(caps) and caps[-1] == L.MAX_N == L.STREAM_MAX_N
    assert len(set(L.STREAM_ALL_LAYOUTS[dtype])) == len(L.STREAM_ALL_LAYOUTS[dtype])
    for lay in L.STREAM_ALL_LAYOUTS[dtype]:
        nc = lay.items // vec
        assert lay.items % vec == 0 and nc <= 8 and lay.tpr == lay.threads and lay.cluster in (1, 2, 4, 8, 16)
        assert L.stream_smem(lay, dtype) == 2 * 16 * nc * lay.threads <= 227 * 1024
        for n in (lay.capacity, lay.capacity - 3, lay.capacity // 3 + 5, 1):
            cols = stream_columns(n, lay, vec)
            assert cols.size == n and np.array_equal(np.sort(cols), np.arange(n))
        for rows in (1, 37, 199, 128, 8192):
            clusters = L.stream_clusters(rows, lay, dtype)
            assert 1 <= clusters <= rows
            assert clusters * lay.cluster <= L.NUM_SMS * L.stream_ctas_per_sm(lay, dtype)
    for n in (1, 7, 1000, 4096, 65536, 262144 - 3, 262144):
        assert n <= L.stream_layout_for(n, dtype).capacity
    with pytest.raises(ValueError, match="exceed"):
        L.stream_layout_for(L.MAX_N + 8, dtype)


def test_stream_versions_take_any_width_but_only_their_layouts():
    # no multiple-of-VEC rule (rows that are not 16-byte multiples are gathered element by element)
    assert L._vec("layernorm_v7_stream", "float32") == 1 and L._vec("rmsnorm_v5_stream", "bfloat16") == 1
    with pytest.raises(ValueError, match="not instantiated for layernorm_v7_stream"):
        L.LN_VERSIONS["v7_stream"].launch(F((2, 1024)), F((1024,)), F((1024,)), F((2, 1024)), layout=L.LAYOUTS[0])
    lay = L.STREAM_LAYOUTS["float32"][0]
    n = lay.capacity + 4
    with pytest.raises(ValueError, match="do not fit"):
        L.RMS_VERSIONS["v5_stream"].launch(F((2, n)), F((n,)), F((2, n)), layout=lay)
