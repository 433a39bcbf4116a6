"""The FlashAttention backward op (kernels/attention_bwd, chapter 16) on the CPU: the float64 reference_grads against
central finite differences of the forward's reference (GQA, both masks, rows that see no key, Sq != Sk), the argument
checks, the cost model, the plans (launch order, grids, shared memory, workspaces shared between launches) and the
ladder's shapes."""
import numpy as np
import pytest

from kernels import attention as A
from kernels import attention_bwd as AB
from tests.fakes import FakeDeviceArray, attn_bwd_arrays
from utils.arrays import bf16
from utils.version import Workspace

SEED = 1603


def _loss_and_grads(B, Hq, Hkv, Sq, Sk, D, causal, scale, seed):
    """float64 inputs, L = sum(dout o out(q, k, v)) from the forward's reference, and reference_grads."""
    rng = np.random.default_rng(seed)
    q, dout = rng.standard_normal((B, Hq, Sq, D)), rng.standard_normal((B, Hq, Sq, D))
    k, v = rng.standard_normal((B, Hkv, Sk, D)), rng.standard_normal((B, Hkv, Sk, D))
    loss = lambda q, k, v: float((A.reference(q, k, v, causal=causal, scale=scale)[0] * dout).sum())  # noqa: E731
    return (q, k, v), loss, AB.reference_grads(q, k, v, dout, causal, scale)


@pytest.mark.parametrize("shape, causal", [((1, 1, 1, 1, 1, 64), False), ((1, 4, 2, 5, 5, 64), True),
                                           ((2, 3, 1, 4, 7, 64), True), ((1, 2, 1, 6, 3, 128), True),
                                           ((1, 4, 1, 3, 4, 64), False)])
def test_reference_grads_are_the_derivatives(shape, causal):
    """Central differences of the forward's float64 reference at 24 random elements of each of q, k, v."""
    inputs, loss, grads = _loss_and_grads(*shape, causal, 0.3, SEED)
    rng = np.random.default_rng(SEED + 1)
    eps = 1e-5
    for name, x, g in zip("qkv", inputs, grads):
        for flat in rng.integers(0, x.size, 24):
            idx = np.unravel_index(flat, x.shape)
            keep = x[idx]
            x[idx] = keep + eps
            up = loss(*inputs)
            x[idx] = keep - eps
            down = loss(*inputs)
            x[idx] = keep
            assert (up - down) / (2 * eps) == pytest.approx(g[idx], rel=1e-6, abs=1e-8), f"d{name} at {idx}"


def test_rows_that_see_no_key_contribute_nothing():
    """Sq > Sk, causal: the first Sq - Sk rows see no key; their dq is 0 and their dout does not reach dk, dv."""
    (q, k, v), _, (dq, dk, dv) = _loss_and_grads(1, 1, 1, 6, 2, 64, True, None, SEED)
    assert (dq[0, 0, :4] == 0).all()
    rng = np.random.default_rng(SEED)
    dout = rng.standard_normal(q.shape)
    changed = dout.copy()
    changed[0, 0, :4] = 1e3                                                  # only rows that see nothing
    for a, b in zip(AB.reference_grads(q, k, v, dout, True), AB.reference_grads(q, k, v, changed, True)):
        np.testing.assert_array_equal(a[..., 4:, :] if a.shape == q.shape else a,
                                      b[..., 4:, :] if b.shape == q.shape else b)


def test_gqa_sums_over_the_group():
    """dK, dV of a shared key/value head are the sums of what each query head of its group gives it alone."""
    (q, k, v), _, (dq, dk, dv) = _loss_and_grads(1, 4, 1, 5, 6, 64, True, None, SEED)
    rng = np.random.default_rng(SEED)
    dout = rng.standard_normal(q.shape)
    dq, dk, dv = AB.reference_grads(q, k, v, dout, True)
    parts = [AB.reference_grads(q[:, h:h + 1], k, v, dout[:, h:h + 1], True) for h in range(4)]
    np.testing.assert_allclose(dk, sum(p[1] for p in parts), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dv, sum(p[2] for p in parts), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dq, np.concatenate([p[0] for p in parts], axis=1), rtol=1e-12, atol=1e-12)


def test_flops_are_two_and_a_half_forwards():
    assert AB.flops(2, 3, 5, 7, 64, False) == 2.5 * A.flops(2, 3, 5, 7, 64, False)
    assert AB.flops(1, 1, 3, 3, 128, True) == 2.5 * 4.0 * 128 * (1 + 2 + 3)


def arrays(B=2, Hq=4, Hkv=2, Sq=33, Sk=70, D=64, **over):
    return attn_bwd_arrays((B, Hq, Sq, D), (B, Hkv, Sk, D), (B, Hq, Sq), **over)


def test_problem():
    p = AB.ATTN_BWD["v0_atomic_dq"].validate(*arrays(), causal=True, scale=0.25)
    assert (p.B, p.Hq, p.Hkv, p.Sq, p.Sk, p.D, p.causal, p.scale) == (2, 4, 2, 33, 70, 64, True, 0.25)
    assert p.Sq_pad == 128 and p.out == (p.dq, p.dk, p.dv) and p.fwd.out is not p.dq


def test_plan_v0():
    v0 = AB.ATTN_BWD["v0_atomic_dq"]
    p = v0.validate(*arrays(Sq=130, Sk=200, D=128))
    prep, dkdv, convert = v0.launches(p)
    assert prep.kernel == "attn_bwd_preprocess<128, true>" and prep.grid == (2 * 4 * 256 // 32, 1, 1)
    assert dkdv.kernel == "attn_bwd_dkdv<128, 128, 64, true>" and dkdv.grid == (2, 2, 2) and dkdv.block == (256, 1, 1)
    assert dkdv.smem == (2 * 128 + 4 * 64) * 128 * 2 + 16 * 64 + 128 * 64 * 2 <= 227 * 1024
    assert convert.kernel == "attn_bwd_dq_convert" and int(convert.args[2]) == 2 * 4 * 130 * 128 // 8
    lse_log2, delta, dq_accum = prep.args[3], prep.args[4], prep.args[5]
    assert all(isinstance(w, Workspace) for w in (lse_log2, delta, dq_accum))
    assert lse_log2.shape == (2, 4, 256) and dq_accum.shape == (2, 4, 130, 128) and dq_accum.fill is None
    assert dkdv.args[4] is lse_log2 and dkdv.args[5] is delta and dkdv.args[6] is dq_accum and convert.args[0] is dq_accum
    assert float(convert.args[3]) == pytest.approx(128 ** -0.5)
    assert [int(a) for a in dkdv.args[9:13]] == [4, 2, 130, 200] and int(dkdv.args[16]) == 256
    assert dkdv.args[17] is AB.NULL and dkdv.args[18] is AB.NULL and prep.args[8] is AB.NULL    # dense: no offsets


def test_plan_v1():
    v1 = AB.ATTN_BWD["v1_deterministic"]
    p = v1.validate(*arrays(Sq=65), causal=True)
    prep, dkdv, dq = v1.launches(p, AB.Tile(64, 64))
    assert prep.kernel == "attn_bwd_preprocess<64, false>"
    assert dkdv.kernel == "attn_bwd_dkdv<64, 64, 64, false>" and dkdv.grid == (2, 2, 2) and dkdv.block == (128, 1, 1)
    assert dkdv.smem == (2 * 64 + 4 * 64) * 64 * 2 + 16 * 64                 # no dS^T tile
    mt, bc = AB.DQ_TILE[64]
    assert dq.kernel == f"attn_bwd_dq<64, {mt}, {bc}>" and dq.grid == (-(-65 // (64 * mt)), 4, 2)
    assert dq.args[4] is prep.args[3] and dq.args[5] is prep.args[4] and dq.args[6] is p.dq


def test_every_tile_fits_shared_memory_and_splits_dq():
    for D in AB.HEAD_DIMS:
        for t in AB.TILES[D]:
            assert AB.dkdv_smem(D, t, True) <= 227 * 1024 and t.bm <= AB.ROW_PAD and t.bn % 16 == 0
            warps, rows = t.bn // 16, t.bm // 32                        # dQ: 32-row warp tiles
            assert warps % rows == 0 and (D // (warps // rows)) % 16 == 0
        assert AB.dq_smem(D, AB.DQ_TILE[D]) <= 227 * 1024 and 64 * AB.DQ_TILE[D].mt <= AB.ROW_PAD
    with pytest.raises(ValueError, match="not instantiated"):
        AB.ATTN_BWD["v0_atomic_dq"].launches(AB.ATTN_BWD["v0_atomic_dq"].validate(*arrays(D=128)), AB.Tile(128, 128))


@pytest.mark.parametrize("over, match", [
    ({"dout": FakeDeviceArray((2, 4, 33, 64), np.float16)}, "dout: expected dtype bfloat16"),
    ({"dq": FakeDeviceArray((2, 4, 34, 64), bf16())}, "dq: expected shape"),
    ({"dk": FakeDeviceArray((2, 4, 70, 64), bf16())}, "dk: expected shape"),
    ({"dv": FakeDeviceArray((2, 2, 70, 64), bf16(), strides=(2 * 70 * 128, 70 * 128, 256, 2))}, "C-contiguous"),
    ({"dv": np.zeros((2, 2, 70, 64), np.float32)}, "expected a CUDA device array"),
    ({"lse": FakeDeviceArray((2, 4, 33), bf16())}, "lse: expected dtype float32"),
    ({"k": FakeDeviceArray((2, 2, 70, 128), bf16())}, "k: expected shape"),
])
def test_rejects_bad_arrays(over, match):
    with pytest.raises(ValueError, match=match):
        AB.ATTN_BWD["v0_atomic_dq"].validate(*arrays(**over))


@pytest.mark.parametrize("kw, match", [(dict(Hq=3, Hkv=2), "attn_bwd: .*multiple of key/value heads"),
                                       (dict(D=96), "attn_bwd: head dimension"),
                                       (dict(Sk=0), "attn_bwd: .*must be >= 1")])
def test_rejects_bad_sizes(kw, match):
    with pytest.raises(ValueError, match=match):
        AB.ATTN_BWD["v1_deterministic"].validate(*arrays(**kw))


@pytest.mark.parametrize("kw, match", [(dict(scale=-1.0), "scale"), (dict(causal="yes"), "causal")])
def test_rejects_bad_keywords(kw, match):
    with pytest.raises(ValueError, match=match):
        AB.ATTN_BWD["v0_atomic_dq"].validate(*arrays(), **kw)


def test_ladder_shapes_and_cost():
    from kernels.attention import ladders as FL
    from kernels.attention_bwd import ladders as L
    assert L.bench_shapes(128, True) == FL.bench_shapes(128, True)
    assert L.cost((1, 2, 2, 3, 3, 64, 1), "bfloat16") == 2.5 * FL.cost((1, 2, 2, 3, 3, 64, 1), "bfloat16")
    assert set(L.PEERS) == {"torch.sdpa.flash", "torch.sdpa.cudnn"}


def varlen_arrays(cq, ck, Hq=4, Hkv=2, D=64):
    return attn_bwd_arrays((cq[-1], Hq, D), (ck[-1], Hkv, D), (Hq, cq[-1]))


def test_varlen_plans_cover_the_longest_sequence():
    cq, ck = np.array([0, 5, 5, 305], np.int32), np.array([0, 40, 41, 141], np.int32)
    v0, v1 = AB.ATTN_BWD_VARLEN["v0_atomic_dq"], AB.ATTN_BWD_VARLEN["v1_deterministic"]
    p = v0.validate(*varlen_arrays(cq, ck), cq, ck, causal=True)
    assert (p.B, p.Sq, p.Sk, p.Sq_pad) == (3, 300, 100, 384) and p.fwd.seqlens_q == (5, 0, 300)
    prep, dkdv, convert = v0.launches(p)
    assert prep.grid == (3 * 4 * 384 // 32, 1, 1) and prep.args[8] is p.fwd.cu_q and int(prep.args[10]) == 305
    assert prep.args[3].shape == (3, 4, 384) and prep.args[5].shape == (305, 4, 64)    # dq_accum: dq's layout
    assert dkdv.grid == (1, 2, 3) and dkdv.args[17] is p.fwd.cu_q and dkdv.args[18] is p.fwd.cu_k
    assert [int(a) for a in dkdv.args[19:21]] == [305, 141] and int(convert.args[2]) == 305 * 4 * 64 // 8
    _, _, dq = v1.launches(v1.validate(*varlen_arrays(cq, ck), cq, ck))
    mt = AB.DQ_TILE[64].mt
    assert dq.grid == (-(-300 // (64 * mt)), 4, 3) and dq.args[17] is not AB.NULL


def test_varlen_rejects():
    cq, ck = np.array([0, 5, 305], np.int32), np.array([0, 40, 141], np.int32)
    v = AB.ATTN_BWD_VARLEN["v1_deterministic"]
    good = varlen_arrays(cq, ck)
    with pytest.raises(ValueError, match="dout"):
        v.validate(*good[:5], FakeDeviceArray((305, 4, 32), bf16(), ptr=1 << 40), *good[6:], cq, ck)
    with pytest.raises(ValueError, match="dk"):
        v.validate(*good[:7], FakeDeviceArray((140, 2, 64), bf16(), ptr=1 << 40), good[8], cq, ck)
    with pytest.raises(ValueError, match="must equal the packed length 141"):
        v.validate(*good, cq, np.array([0, 40, 140], np.int32))
    with pytest.raises(ValueError, match="never decrease"):
        v.validate(*good, np.array([0, 306, 305], np.int32), ck)


def test_varlen_reference_is_the_dense_reference_per_sequence():
    """Each packed sequence's gradients are reference_grads of that sequence alone (as [1, H, S, D]); a sequence
    without queries leaves its keys' gradients 0, one without keys its queries'."""
    rng = np.random.default_rng(1603)
    cq, ck, Hq, Hkv, D = [0, 3, 3, 10, 14], [0, 5, 9, 9, 16], 4, 2, 8
    q, dout = rng.standard_normal((cq[-1], Hq, D)), rng.standard_normal((cq[-1], Hq, D))
    k, v = rng.standard_normal((ck[-1], Hkv, D)), rng.standard_normal((ck[-1], Hkv, D))
    dq, dk, dv = AB.varlen_reference_grads(q, k, v, dout, np.array(cq, np.int32), np.array(ck, np.int32), True)
    heads = lambda a, lo, hi: a[lo:hi].transpose(1, 0, 2)[None]      # noqa: E731
    for b in (0, 3):                                                  # sequences with queries and keys
        want = AB.reference_grads(heads(q, cq[b], cq[b + 1]), heads(k, ck[b], ck[b + 1]), heads(v, ck[b], ck[b + 1]),
                                  heads(dout, cq[b], cq[b + 1]), True)
        for got, w, (lo, hi) in zip((dq, dk, dv), want, [(cq[b], cq[b + 1]), (ck[b], ck[b + 1]), (ck[b], ck[b + 1])]):
            np.testing.assert_allclose(got[lo:hi], w[0].transpose(1, 0, 2), rtol=1e-12, atol=1e-12)
    assert not dk[ck[1]:ck[2]].any() and not dv[ck[1]:ck[2]].any()   # sequence 1: keys, no queries
    assert not dq[cq[2]:cq[3]].any()                                   # sequence 2: queries, no keys
