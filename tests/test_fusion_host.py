"""Chapter 8 host side on a CPU: byte ledgers, references, launch geometry, launcher validation, and the
index maps of every fused kernel (16-byte and scalar paths) replayed in NumPy, thread by thread."""
import math
import re
import zlib

import numpy as np
import pytest

pytest.importorskip("ml_dtypes")

from kernels import fusion as F
from tests.fakes import FakeDeviceArray
from utils.version import Unsupported

BF = F.BF16
SEED = 20260808


@pytest.fixture
def rng(request):
    """Seeded per test (the seed is printed, so a failure shows it)."""
    seed = SEED + zlib.crc32(request.node.name.encode()) % 10**6
    print(f"rng seed {seed}")
    return np.random.default_rng(seed)


def fa(shape, dtype=BF, **kw):
    return FakeDeviceArray(shape, dtype, **kw)


def only_launch(registry, label, *shapes, config=None):
    """The single launch of version ``label`` for fake device arrays of ``shapes``."""
    v = registry[label]
    (ln,) = v.launches(v.validate(*(fa(s) for s in shapes)), config)
    return ln


def bf16(a):
    return np.asarray(a, np.float32).astype(BF)


def rnd(v):
    """fp32 -> bf16 -> fp32, as the kernels' final rounding."""
    return np.float32(v).astype(BF).astype(np.float32) if np.isscalar(v) else \
        np.asarray(v, np.float32).astype(BF).astype(np.float32)


# --- ledgers ------------------------------------------------------------------------------------------

def test_ledgers_predict_the_textbook_ratios():
    lg = F.ledger_bias_gelu(8192, 4096)
    assert F.predicted_speedup(lg) == pytest.approx(2.0, rel=1e-3)
    assert lg["fused"] == 2 * 2 * 8192 * 4096 + 2 * 4096
    assert F.predicted_speedup(F.ledger_swiglu(8192, 11008)) == pytest.approx(5 / 3)
    rms = F.ledger_add_rmsnorm(8192, 4096)
    assert F.predicted_speedup(rms) == pytest.approx(42 / 8, rel=1e-2)
    assert F.predicted_speedup(F.ledger_add_rms_norm_op(8192, 4096)) == pytest.approx(10 / 8, rel=1e-3)
    rope = F.ledger_rope(8192, 32, 32, 128)
    assert F.predicted_speedup(rope) == pytest.approx(5.0, rel=2e-2)
    assert F.chain_bytes(rope) == sum(r + w for _, r, w in rope["chain"])


# --- references ---------------------------------------------------------------------------------------

def test_reference_bias_gelu_known_values():
    x = bf16([[0.0, 1.0, -1.0, 8.0]])
    b = bf16([0.0, 0.0, 0.0, 0.0])
    r = F.reference_bias_gelu(x, b)
    assert r[0, 0] == 0.0 and r[0, 3] == pytest.approx(8.0)
    assert r[0, 1] == pytest.approx(0.8413447460685429) and r[0, 2] == pytest.approx(-0.15865525393145707)


def test_reference_swiglu_and_rope_identities(rng):
    x = bf16(rng.standard_normal((3, 10)))
    g, u = x[:, :5].astype(np.float64), x[:, 5:].astype(np.float64)
    assert np.allclose(F.reference_swiglu(x), g * u / (1 + np.exp(-g)))
    q = bf16(rng.standard_normal((4, 2, 6)))
    cos, sin = F.rope_tables(4, 3)
    out = F.reference_rope(q, cos, sin)
    assert np.allclose(out[0], q[0].astype(np.float64))        # position 0: the identity
    # a rotation keeps the norm of every (d, d + D/2) pair, up to the tables' bf16 rounding
    n_in = np.linalg.norm(q.astype(np.float64).reshape(4, 2, 2, 3), axis=2)
    n_out = np.linalg.norm(out.reshape(4, 2, 2, 3), axis=2)
    assert np.allclose(n_in, n_out, rtol=1e-2)


def test_reference_add_rmsnorm_rounds_h_and_normalizes(rng):
    x, r = bf16(rng.standard_normal((5, 24))), bf16(rng.standard_normal((5, 24)))
    w = bf16(np.ones(24))
    h, y = F.reference_add_rmsnorm(x, r, w, eps=0.0)
    assert np.array_equal(h, (x.astype(np.float32) + r.astype(np.float32)).astype(BF).astype(np.float64))
    assert np.allclose((y * y).mean(axis=1), 1.0)


# --- geometry -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 37, 4095, 4096, 4097, 8192 * 4096])
def test_elementwise_grid_covers(n):
    g = F.grid_elementwise(n)
    assert g * F.THREADS * F.UNROLL * 8 >= n > (g - 1) * F.THREADS * F.UNROLL * 8


@pytest.mark.parametrize("D,block", [(1, 32), (16, 32), (512, 32), (513, 64), (4096, 256), (4095, 256),
                                     (8192, 512), (16384, 1024)])
def test_rmsnorm_block(D, block):
    assert F.rmsnorm_block(D) == block
    assert D <= 8 * F.RMS_MAX_CHUNKS * block


# --- the kernels' index maps replayed in NumPy ---------------------------------------------------------

def _gelu_scalar(v):
    """Exact GELU of one value, as the simulated kernels compute it per element."""
    return 0.5 * v * (1 + math.erf(v / math.sqrt(2)))


def sim_bias_gelu(x, b):
    rows, cols = x.shape
    n = rows * cols
    xf, bfl = x.astype(np.float32).ravel(), b.astype(np.float32)
    y = np.full(n, np.nan, np.float32)
    written = np.zeros(n, int)
    ln = only_launch(F.BIAS_GELU, "v2_poly", x.shape, (cols,), x.shape)
    assert ln.block == (F.THREADS, 1, 1) and ln.grid[1:] == (1, 1)
    for blk in range(ln.grid[0]):
        for t in range(F.THREADS):
            if cols % 8 == 0:
                nv, cv = n // 8, cols // 8
                for u in range(F.UNROLL):
                    i = blk * F.THREADS * F.UNROLL + t + u * F.THREADS
                    if i < nv:
                        bc = i % cv
                        for e in range(8):
                            y[8 * i + e] = _gelu_scalar(xf[8 * i + e] + bfl[8 * bc + e])
                            written[8 * i + e] += 1
            else:
                for k in range(F.UNROLL * 8):
                    i = blk * F.THREADS * F.UNROLL * 8 + t + k * F.THREADS
                    if i < n:
                        y[i] = _gelu_scalar(xf[i] + bfl[i % cols])
                        written[i] += 1
    assert (written == 1).all()
    return y.reshape(rows, cols)


def sim_bias_gelu_rows(x, b, per):
    """bias_gelu_v3's 2-D map: grid.x row blocks of ``per`` rows, grid.y column blocks of THREADS chunks."""
    rows, cols = x.shape
    xf, bfl = x.astype(np.float32), b.astype(np.float32)
    y = np.full((rows, cols), np.nan, np.float32)
    written = np.zeros((rows, cols), int)
    vec = 8 if cols % 8 == 0 else 1
    ln = only_launch(F.BIAS_GELU, "v3_rows", x.shape, (cols,), x.shape, config=F.BiasGeluRows(per, "poly"))
    gx, gy, _ = ln.grid
    assert gx * per >= rows and gy * F.THREADS * vec >= cols
    for bx in range(gx):
        for by in range(gy):
            for t in range(F.THREADS):
                c = by * F.THREADS + t
                if c >= cols // vec:
                    continue
                for k in range(min(per, rows - bx * per)):
                    r = bx * per + k
                    for e in range(vec):
                        y[r, vec * c + e] = _gelu_scalar(xf[r, vec * c + e] + bfl[vec * c + e])
                        written[r, vec * c + e] += 1
    assert (written == 1).all()
    return y


def sim_swiglu(x):
    rows, two_h = x.shape
    H = two_h // 2
    n = rows * H
    xf = x.astype(np.float32).ravel()
    y = np.full(n, np.nan, np.float32)
    written = np.zeros(n, int)
    silu = lambda v: v / (1 + math.exp(-v))
    for blk in range(only_launch(F.SWIGLU, "v1_vec8", x.shape, (rows, H)).grid[0]):
        for t in range(F.THREADS):
            if H % 8 == 0:
                hv, nv = H // 8, n // 8
                for u in range(F.UNROLL):
                    i = blk * F.THREADS * F.UNROLL + t + u * F.THREADS
                    if i < nv:
                        r, c = i // hv, i % hv
                        g0, u0 = 8 * (2 * r * hv + c), 8 * (2 * r * hv + hv + c)
                        for e in range(8):
                            y[8 * i + e] = silu(xf[g0 + e]) * xf[u0 + e]
                            written[8 * i + e] += 1
            else:
                for k in range(F.UNROLL * 8):
                    i = blk * F.THREADS * F.UNROLL * 8 + t + k * F.THREADS
                    if i < n:
                        r, c = i // H, i % H
                        y[i] = silu(xf[2 * r * H + c]) * xf[2 * r * H + H + c]
                        written[i] += 1
    assert (written == 1).all()
    return y.reshape(rows, H)


def sim_add_rmsnorm(x, res, w, eps):
    rows, D = x.shape
    ln = only_launch(F.ADD_RMSNORM, "v1_vec8", *[x.shape] * 2, (D,), *[x.shape] * 2)
    B = ln.block[0]
    assert ln.grid == (rows, 1, 1)
    xf, rf, wf = x.astype(np.float32), res.astype(np.float32), w.astype(np.float32)
    ro = np.full((rows, D), np.nan, np.float32)
    y = np.full((rows, D), np.nan, np.float32)
    for row in range(rows):
        owned = {}                       # thread -> list of element indices it holds in registers
        for t in range(B):
            if D % 8 == 0:
                cols = [8 * c + e for k in range(F.RMS_MAX_CHUNKS) for c in [t + k * B] if c < D // 8
                        for e in range(8)]
            else:
                cols = [c for k in range(8 * F.RMS_MAX_CHUNKS) for c in [t + k * B] if c < D]
            owned[t] = cols
        allc = sorted(c for cs in owned.values() for c in cs)
        assert allc == list(range(D))    # every element owned by exactly one thread
        h = rnd(xf[row] + rf[row])
        ro[row] = h
        rstd = 1 / math.sqrt(float(np.sum(h.astype(np.float64) ** 2)) / D + eps)
        y[row] = h * rstd * wf
    return ro, y


def _rope_item(tok, s, j, vec, dims, srcs, dsts, counts, tables):
    """One work item of either RoPE kernel: head slot s of token tok (q below Hq, else k), chunk j of vec pairs."""
    Hq, Hk, half = dims
    isq = s < Hq
    off = ((tok * Hq + s) if isq else (tok * Hk + s - Hq)) * 2 * half + vec * j
    src, dst, wr = (srcs[0], dsts[0], counts[0]) if isq else (srcs[1], dsts[1], counts[1])
    cf, sf = tables
    for e in range(vec):
        a, b = src[off + e], src[off + half + e]
        c, sn = cf[tok * half + vec * j + e], sf[tok * half + vec * j + e]
        dst[off + e] = a * c - b * sn
        dst[off + half + e] = b * c + a * sn
        wr[off + e] += 1
        wr[off + half + e] += 1


def sim_rope(q, k, cos, sin):
    T, Hq, D = q.shape
    Hk, half = k.shape[1], D // 2
    vec = 8 if half % 8 == 0 else 1
    nj, slots = half // vec, Hq + Hk
    items = T * slots * nj
    assert items == F.rope_items(T, Hq, Hk, half)
    qf, kf = q.astype(np.float32).ravel(), k.astype(np.float32).ravel()
    cf, sf = cos.astype(np.float32).ravel(), sin.astype(np.float32).ravel()
    qo, ko = np.full(qf.size, np.nan, np.float32), np.full(kf.size, np.nan, np.float32)
    wq, wk = np.zeros(qf.size, int), np.zeros(kf.size, int)
    ln = only_launch(F.ROPE, "v1_vec8", q.shape, k.shape, (T, half), (T, half), q.shape, k.shape)
    for blk in range(ln.grid[0]):
        for t in range(F.THREADS):
            for u in range(F.UNROLL):
                it = blk * F.THREADS * F.UNROLL + t + u * F.THREADS
                if it >= items:
                    continue
                j, ts = it % nj, it // nj
                s, tok = ts % slots, ts // slots
                _rope_item(tok, s, j, vec, (Hq, Hk, half), (qf, kf), (qo, ko), (wq, wk), (cf, sf))
    assert (wq == 1).all() and (wk == 1).all()
    return qo.reshape(q.shape), ko.reshape(k.shape)


def sim_rope_v2(q, k, cos, sin):
    """rope_neox_v2_tok's map: block t, thread (tx, ty) of rope_v2_block(half); chunk positions j = tx + i bx,
    slots ty + i by (in batches of ROPE_ITEMS, which only orders the loads)."""
    T, Hq, D = q.shape
    Hk, half = k.shape[1], D // 2
    vec = 8 if half % 8 == 0 else 1
    nj, slots = half // vec, Hq + Hk
    ln = only_launch(F.ROPE, "v2_tok", q.shape, k.shape, (T, half), (T, half), q.shape, k.shape)
    bx, by, _ = ln.block
    assert ln.grid == (T, 1, 1) and bx * by <= F.THREADS and bx >= 1 and by >= 1
    qf, kf = q.astype(np.float32).ravel(), k.astype(np.float32).ravel()
    cf, sf = cos.astype(np.float32).ravel(), sin.astype(np.float32).ravel()
    qo, ko = np.full(qf.size, np.nan, np.float32), np.full(kf.size, np.nan, np.float32)
    wq, wk = np.zeros(qf.size, int), np.zeros(kf.size, int)
    for tok in range(T):
        for ty in range(by):
            for tx in range(bx):
                for j in range(tx, nj, bx):
                    for sl in range(ty, slots, by):
                        _rope_item(tok, sl, j, vec, (Hq, Hk, half), (qf, kf), (qo, ko), (wq, wk), (cf, sf))
    assert (wq == 1).all() and (wk == 1).all()
    return qo.reshape(q.shape), ko.reshape(k.shape)


def rel(a, b):
    return np.linalg.norm(np.asarray(a, np.float64) - b) / np.linalg.norm(b)


@pytest.mark.parametrize("shape", [(1, 8), (37, 24), (3, 4104), (2, 13), (5, 3), (1, 1)])
def test_bias_gelu_index_map(shape, rng):
    x, b = bf16(rng.standard_normal(shape)), bf16(rng.standard_normal(shape[1]))
    assert rel(rnd(sim_bias_gelu(x, b)), F.reference_bias_gelu(x, b)) < 1e-2


@pytest.mark.parametrize("per", [2, 4, 8])
@pytest.mark.parametrize("shape", [(1, 8), (9, 24), (3, 2056), (2, 13), (5, 3), (1, 1)])
def test_bias_gelu_rows_index_map(shape, per, rng):
    x, b = bf16(rng.standard_normal(shape)), bf16(rng.standard_normal(shape[1]))
    assert rel(rnd(sim_bias_gelu_rows(x, b, per)), F.reference_bias_gelu(x, b)) < 1e-2


@pytest.mark.parametrize("config", list(F.BIAS_GELU_ROWS_KERNELS))
def test_bias_gelu_rows_instances_match_the_source(config):
    src = F.SOURCE.path.read_text()
    form = {"erf": "GELU_ERF", "poly": "GELU_POLY"}[config.gelu]
    ln = only_launch(F.BIAS_GELU, "v3_rows", (9, 2056), (2056,), (9, 2056), config=config)
    assert f"BIAS_GELU_ROWS_KERNEL({ln.kernel}, {form}, {config.rows})" in src, config
    assert F.BIAS_GELU[3].default(None) == F.BIAS_GELU_V3 and F.BIAS_GELU_V3.gelu == "poly"


def test_bias_gelu_v3_refuses_more_column_blocks_than_a_grid_holds():
    cols = 65536 * F.THREADS * 8
    v = F.BIAS_GELU["v3_rows"]
    p = v.validate(fa((1, cols)), fa((cols,)), fa((1, cols)))
    with pytest.raises(Unsupported, match="65535"):
        v.launches(p)
    assert F.BIAS_GELU["v2_poly"].supports(p)


@pytest.mark.parametrize("shape", [(1, 16), (37, 48), (3, 2 * 2056), (2, 26), (5, 2)])
def test_swiglu_index_map(shape, rng):
    x = bf16(rng.standard_normal(shape))
    assert rel(rnd(sim_swiglu(x)), F.reference_swiglu(x)) < 1e-2


@pytest.mark.parametrize("shape", [(1, 8), (37, 64), (3, 4096), (2, 13), (4, 4100), (2, 520)])
def test_add_rmsnorm_index_map(shape, rng):
    x, r = bf16(rng.standard_normal(shape)), bf16(rng.standard_normal(shape))
    w = bf16(rng.standard_normal(shape[1]))
    ro, y = sim_add_rmsnorm(x, r, w, F.EPS)
    h, ref = F.reference_add_rmsnorm(x, r, w)
    assert np.array_equal(ro, h)
    assert rel(rnd(y), ref) < 1e-2


@pytest.mark.parametrize("T,Hq,Hk,D", [(1, 1, 1, 16), (37, 3, 1, 32), (5, 2, 2, 6), (3, 1, 2, 20), (2, 4, 4, 128)])
def test_rope_index_map(T, Hq, Hk, D, rng):
    q, k = bf16(rng.standard_normal((T, Hq, D))), bf16(rng.standard_normal((T, Hk, D)))
    cos, sin = F.rope_tables(T, D // 2)
    qo, ko = sim_rope(q, k, cos, sin)
    assert rel(rnd(qo), F.reference_rope(q, cos, sin)) < 1e-2
    assert rel(rnd(ko), F.reference_rope(k, cos, sin)) < 1e-2


@pytest.mark.parametrize("T,Hq,Hk,D", [(1, 1, 1, 16), (3, 3, 1, 32), (2, 2, 2, 6), (3, 1, 2, 20), (2, 40, 8, 128),
                                       (1, 2, 1, 1024), (1, 1, 1, 600)])
def test_rope_v2_index_map(T, Hq, Hk, D, rng):
    q, k = bf16(rng.standard_normal((T, Hq, D))), bf16(rng.standard_normal((T, Hk, D)))
    cos, sin = F.rope_tables(T, D // 2)
    qo, ko = sim_rope_v2(q, k, cos, sin)
    assert rel(rnd(qo), F.reference_rope(q, cos, sin)) < 1e-2
    assert rel(rnd(ko), F.reference_rope(k, cos, sin)) < 1e-2


@pytest.mark.parametrize("half,block", [(64, (8, 32)), (128, (16, 16)), (512, (32, 8)), (10, (10, 25)), (3, (3, 85)),
                                        (300, (32, 8))])
def test_rope_v2_block(half, block):
    assert F.rope_v2_block(half) == block


# --- registry, snippets, CuPy route -----------------------------------------------------------------

VERSIONS = [(op, label) for op, reg in F.REGISTRIES.items() for label in reg]

# one problem of each op that every version takes: (shapes of the arrays, config-free)
SHAPES = {"bias_gelu": [(37, 4104), (4104,), (37, 4104)], "swiglu": [(37, 96), (37, 48)],
          "add_rmsnorm": [(37, 4096), (37, 4096), (4096,), (37, 4096), (37, 4096)],
          "rope": [(37, 40, 128), (37, 8, 128), (37, 64), (37, 64), (37, 40, 128), (37, 8, 128)]}


@pytest.mark.parametrize("op,label", VERSIONS)
def test_version_names_snippets_and_kernels(op, label):
    from utils.show import snippets
    v = F.REGISTRIES[op][label]
    assert v.name == f"{op}_{label}" and v.source is F.SOURCE and not v.requires
    src = F.SOURCE.path.read_text()
    assert v.snippet in snippets(src)
    p = v.validate(*(fa(s) for s in SHAPES[op]))
    for cfg in v.all_configs(p) or (None,):
        for ln in v.launches(p, cfg):
            assert (re.search(rf"__global__ void __launch_bounds__\(\w+\)\s*{ln.kernel}\(", src)
                    or f"BIAS_GELU_ROWS_KERNEL({ln.kernel}," in src), ln.kernel
            assert ln.threads <= 1024 and ln.args[:len(p.arrays)] == p.arrays


@pytest.mark.parametrize("op,label", VERSIONS)
def test_parents_are_the_previous_version(op, label):
    reg = F.REGISTRIES[op]
    v = reg[label]
    earlier = [lab for lab in reg if reg[lab].number < v.number]
    assert v.parent == (earlier[-1] if earlier else None)


def test_shared_snippets_exist():
    from utils.show import snippets
    assert "fusion_vec8" in snippets(F.SOURCE.path.read_text())
    assert "gelu_poly" in snippets((F.INCLUDE / "fusion_scalar.cuh").read_text())


@pytest.mark.parametrize("op", list(F.REGISTRIES))
def test_ladder_inputs_cost_the_fused_bytes(op):
    shape = {"bias_gelu": (8192, 4096), "swiglu": (8192, 11008), "add_rmsnorm": (8192, 4096),
             "rope": (8192, 32, 32, 128)}[op]
    spec = F.ladder_inputs(op)
    assert set(spec) == {"make", "reference", "nbytes"}
    ledger = F.LEDGERS[op](*shape)
    assert spec["nbytes"](shape, BF) == ledger["fused"]
    with pytest.raises(ValueError, match="op: expected one of"):
        F.ladder_inputs("gelu")


@pytest.mark.parametrize("op", list(F.REGISTRIES))
def test_peers_are_the_eager_chain_compile_and_cupy(op):
    names = list(F.peers(op))
    assert names[0] == "torch.eager" and "torch.compile" in names and names[-1] == F.CUPY_NAMES[op]
    with pytest.raises(ValueError, match="op: expected one of"):
        F.peers("gelu")


# --- the polynomial GELU of bias_gelu_v2: the error bound stated in fusion_scalar.cuh ------------------

def _gelu_exact(v):
    return np.array([x * 0.5 * math.erfc(-x / math.sqrt(2.0)) for x in np.asarray(v, np.float64)])


def test_gelu_poly_constants_match_the_header():
    text = (F.INCLUDE / "fusion_scalar.cuh").read_text()
    assert len(F.gelu_poly_coefficients()) == 10                     # degree 9
    assert "#define GELU_POLY_A_MAX 13.0f" in text


def test_gelu_poly_relative_error_bound():
    """Dense sweep of fp32 v in [-13, 13] (v = x + b is an fp32 sum, not a bf16 value), plus every bf16
    value in that range: relative error <= 5e-5 (the header says 4.4e-5 + ex2's 2^-22), i.e. under
    1/39 of the smallest half-ulp of bf16 (2^-9 relative), for |v| <= 12.95; absolute error under
    2^-122 on [-13, -12.95], where e = Phi(v) has flushed to 0."""
    v = np.concatenate([np.linspace(-13.0, 13.0, 400_001, dtype=np.float32),
                        np.arange(0, 2**16, dtype=np.uint16).view(BF).astype(np.float32)])
    v = v[np.isfinite(v) & (np.abs(v) <= 13.0) & (np.abs(v) >= 2.0**-100)]
    exact = _gelu_exact(v)
    got = F.gelu_poly_emulated(v).astype(np.float64)
    flushed = v < -12.95
    assert np.abs(got[flushed] - exact[flushed]).max() < 2.0**-122
    keep = ~flushed & (np.abs(exact) >= 2.0**-126)                     # fp32 normal results only
    rel_err = np.abs(got[keep] - exact[keep]) / np.abs(exact[keep])
    assert rel_err.max() <= 5e-5 - 2.0**-22, f"max relative error {rel_err.max():.3e}"
    assert rel_err.max() * 39 < 2.0**-9
    # the erff formula torch uses loses its relative accuracy in the negative tail; ours does not
    tail = v[keep] < -4
    assert rel_err[tail].max() <= 5e-5


def test_gelu_poly_beyond_the_fit_and_special_values():
    v = np.array([13.0, 13.5, 50.0, 1e30, np.inf, -13.5, -50.0, -1e30, -np.inf, 0.0, -0.0, np.nan], np.float32)
    y = F.gelu_poly_emulated(v)
    assert np.array_equal(y[:5], v[:5])                                # Phi = 1 to fp32: y = v exactly
    assert np.all(np.abs(y[5:9]) < 1e-36)                              # Phi(-13) * 13 is below fp32 normal
    assert y[9] == 0 and y[10] == 0 and np.isnan(y[11])
    # the polynomial keeps falling past the fit interval, so the clamp at 13 is where e has already flushed
    coef = F.gelu_poly_coefficients()
    q13 = np.polyval(np.array(coef, np.float64), 13.0)
    assert q13 < -126


CUDA_BUILTINS = {"rsqrtf"}


@pytest.mark.parametrize("name", list(F.CUPY_EXPRESSIONS))
def test_cupy_expressions_call_only_the_preamble_helpers(name):
    """Every function an expression calls is a helper the preamble defines (or a CUDA built-in), and the
    preamble is the header itself, less its include guard: the library route and the kernels share one formula."""
    pre = F.cupy_preamble()
    header = (F.INCLUDE / "fusion_scalar.cuh").read_text()
    assert "#pragma once" not in pre and "#include" not in pre
    assert [ln for ln in header.splitlines() if not ln.strip().startswith("#pragma once")] == pre.splitlines()
    defined = set(re.findall(r"__device__ __forceinline__ [\w ]+? (\w+)\(", pre))
    called = set(re.findall(r"\b([A-Za-z_]\w*)\s*\(", F.CUPY_EXPRESSIONS[name])) - {"int", "float"}
    assert called, name
    assert called <= defined | CUDA_BUILTINS, (name, called - defined - CUDA_BUILTINS)


def test_kernel_constants_match_the_source():
    src = F.SOURCE.path.read_text()
    assert f"#define FUSE_THREADS {F.THREADS}" in src
    assert f"#define FUSE_UNROLL {F.UNROLL}" in src
    assert f"#define RMS_MAX_CHUNKS {F.RMS_MAX_CHUNKS}" in src


# --- launcher validation ------------------------------------------------------------------------------

@pytest.mark.parametrize("args,msg", [
    ((np.zeros((4, 8), np.float32), fa((8,)), fa((4, 8))), "expected a CUDA device array"),
    ((fa((4, 8), np.float32), fa((8,)), fa((4, 8))), "expected dtype bfloat16"),
    ((fa((32,)), fa((8,)), fa((4, 8))), "expected 2 dimensions"),
    ((fa((0, 8)), fa((8,)), fa((0, 8))), "at least one row"),
    ((fa((4, 8)), fa((9,)), fa((4, 8))), r"b: expected shape \(8\)"),
    ((fa((4, 8)), fa((8,)), fa((8, 4))), r"y: expected shape \(4, 8\)"),
    ((fa((4, 8), strides=(2, 8)), fa((8,)), fa((4, 8))), "C-contiguous"),
    ((fa((4, 8)), fa((8,), ptr=0x10002), fa((4, 8))), "aligned"),
    ((fa((65536, 32768)), fa((32768,)), fa((65536, 32768))), "int32"),
    ((fa((1, 2**31 - 4095)), fa((2**31 - 4095,)), fa((1, 2**31 - 4095))), "int32"),   # index overhang
])
def test_bias_gelu_rejects(args, msg):
    with pytest.raises(ValueError, match=msg):
        F.BIAS_GELU.problem(*args)


def test_bias_gelu_rejects_unknown_config():
    v = F.BIAS_GELU["v3_rows"]
    with pytest.raises(ValueError, match="not instantiated"):
        v.launches(v.validate(fa((4, 8)), fa((8,)), fa((4, 8))), F.BiasGeluRows(3, "poly"))


@pytest.mark.parametrize("args,msg", [
    ((fa((4, 7)), fa((4, 3))), "even last dimension"),
    ((fa((4, 8)), fa((4, 8))), r"y: expected shape \(4, 4\)"),
    ((fa((4, 8), np.float16), fa((4, 4))), "dtype bfloat16"),
])
def test_swiglu_rejects(args, msg):
    with pytest.raises(ValueError, match=msg):
        F.SWIGLU.problem(*args)


@pytest.mark.parametrize("args,msg", [
    ((fa((4, 8)), fa((4, 9)), fa((8,)), fa((4, 8)), fa((4, 8))), r"residual: expected shape \(4, 8\)"),
    ((fa((4, 8)), fa((4, 8)), fa((4,)), fa((4, 8)), fa((4, 8))), r"w: expected shape \(8\)"),
    ((fa((4, 8)), fa((4, 8)), fa((8,)), fa((4, 8)), fa((8, 4))), r"y: expected shape \(4, 8\)"),
    ((fa((2, 16392)), fa((2, 16392)), fa((16392,)), fa((2, 16392)), fa((2, 16392))), "at most 16384"),
])
def test_add_rmsnorm_rejects(args, msg):
    with pytest.raises(ValueError, match=msg):
        v = F.ADD_RMSNORM["v1_vec8"]
        v.launches(v.validate(*args))


@pytest.mark.parametrize("args,msg", [
    ((fa((4, 2, 7)), fa((4, 2, 7)), fa((4, 3)), fa((4, 3)), fa((4, 2, 7)), fa((4, 2, 7))), "even head size"),
    ((fa((4, 2, 8)), fa((5, 2, 8)), fa((4, 4)), fa((4, 4)), fa((4, 2, 8)), fa((5, 2, 8))), r"k: expected shape \(4, \*, 8\)"),
    ((fa((4, 2, 8)), fa((4, 1, 8)), fa((4, 8)), fa((4, 4)), fa((4, 2, 8)), fa((4, 1, 8))), r"cos: expected shape \(4, 4\)"),
    ((fa((4, 2, 8)), fa((4, 1, 8)), fa((4, 4)), fa((4, 4)), fa((4, 2, 8)), fa((4, 2, 8))), r"k_out: expected shape \(4, 1, 8\)"),
])
def test_rope_rejects(args, msg):
    with pytest.raises(ValueError, match=msg):
        F.ROPE.problem(*args)


def test_cupy_expressions_compile_with_nvrtc():
    """The CuPy route's expressions, wrapped the way CuPy declares their variables (typed scalars for
    element-wise params, pointers for raw params, ptrdiff_t i), compile with NVRTC against the preamble."""
    core = pytest.importorskip("cuda.core")
    from utils.build import cuda_include_dirs
    e = F.CUPY_EXPRESSIONS
    src = F.cupy_preamble() + f"""
typedef unsigned short u16;
extern "C" __global__ void t_bias_gelu(const u16* X, const u16* B, u16* Y) {{
    const ptrdiff_t i = threadIdx.x; u16 x = X[i], b = B[i]; u16 y; {e["bias_gelu"]}; Y[i] = y; }}
extern "C" __global__ void t_swiglu(const u16* G, const u16* U, u16* Y) {{
    const ptrdiff_t i = threadIdx.x; u16 g = G[i], u = U[i]; u16 y; {e["swiglu"]}; Y[i] = y; }}
extern "C" __global__ void t_sumsq(const u16* X, const u16* R, float* S) {{
    const ptrdiff_t i = threadIdx.x; u16 x = X[i], r = R[i]; S[i] = {e["rms_sumsq"]}; }}
extern "C" __global__ void t_apply(const u16* X, const u16* R, const float* SS, const u16* W, float inv_d,
                                   float eps, u16* RO, u16* Y) {{
    const ptrdiff_t i = threadIdx.x; u16 x = X[i], r = R[i], w = W[i]; float ss = SS[i]; u16 ro, y;
    {e["rms_apply"]}; RO[i] = ro; Y[i] = y; }}
extern "C" __global__ void t_rope(const u16* x, const u16* cs, const u16* sn, int H, int hd, u16* Y) {{
    const ptrdiff_t i = threadIdx.x; u16 y; {e["rope"]}; Y[i] = y; }}
"""
    src = "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n" + src   # names CuPy's own headers bring in
    opts = core.ProgramOptions(arch="sm_90", std="c++17", include_path=list(cuda_include_dirs()))
    obj = core.Program(src, "c++", opts).compile("cubin")
    assert obj.code


def test_sass_instructions_per_element():
    text = """
        /*0010*/                   LDG.E.128.CONSTANT R4, desc[UR4][R2.64] ;
.L_x_1:
        /*0020*/                   LDG.E.128.CONSTANT R8, desc[UR4][R2.64+0x1000] ;
        /*0030*/                   FADD.FTZ R4, R4, R8 ;
        /*0040*/                   STG.E.128 desc[UR4][R2.64], R4 ;
        /*0050*/                   FMUL.FTZ R8, R8, R8 ;
        /*0060*/                   STG.E.128 desc[UR4][R2.64+0x1000], R8 ;
        /*0070*/                   EXIT ;
"""
    assert F.sass_instructions_per_element(text, elements=1) == 3
    assert F.sass_span_per_element(text, elements=1) == 6      # first load .. last store, both included
    assert F.sass_span_per_element(text, elements=2) == 3


def test_reference_bias_gelu_keeps_the_far_negative_tail():
    """erfc, not 1 + erf: at v = -10, 1 + erf(v / sqrt 2) is 0 in float64 but gelu(v) = -7.6e-23."""
    x, b = bf16(np.array([[-10.0, -8.5, -4.0, 10.0]])), bf16(np.zeros(4))
    r = F.reference_bias_gelu(x, b)[0]
    for got, v in zip(r, (-10.0, -8.5, -4.0, 10.0)):
        assert got == pytest.approx(0.5 * v * math.erfc(-v / math.sqrt(2)), rel=1e-12)
    assert -1e-22 < r[0] < -1e-23
