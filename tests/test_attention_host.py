"""The FlashAttention forward op (kernels/attention, chapter 15) on the CPU: the float64 reference against a
row-by-row softmax written out plainly (GQA, both causal alignments, rows that see no key), the argument checks,
the cost model and v0's plan."""
import math

import numpy as np
import pytest

from kernels import attention as A
from tests.fakes import FakeDeviceArray
from utils.arrays import bf16

SEED = 1501


def _inputs(rng, B, Hq, Hkv, Sq, Sk, D):
    q, k, v = (rng.standard_normal(s).astype(np.float32).astype(bf16()) for s in
               ((B, Hq, Sq, D), (B, Hkv, Sk, D), (B, Hkv, Sk, D)))
    return q, k, v


def _plain(q, k, v, causal, scale):
    """One row at a time, no vectorised masking: the definition the reference must match."""
    B, Hq, Sq, D = q.shape
    Hkv, Sk = k.shape[1], k.shape[2]
    out, lse = np.zeros((B, Hq, Sq, D)), np.full((B, Hq, Sq), -np.inf)
    for b in range(B):
        for h in range(Hq):
            g = h // (Hq // Hkv)
            for i in range(Sq):
                keys = [j for j in range(Sk) if not causal or j <= i + Sk - Sq]
                if not keys:
                    continue
                s = np.array([scale * float(np.dot(q[b, h, i].astype(np.float64), k[b, g, j].astype(np.float64)))
                              for j in keys])
                e = np.exp(s - s.max())
                out[b, h, i] = (e[:, None] * v[b, g, keys].astype(np.float64)).sum(0) / e.sum()
                lse[b, h, i] = s.max() + math.log(e.sum())
    return out, lse


@pytest.mark.parametrize("shape, causal", [((1, 1, 1, 1, 1, 64), False), ((2, 4, 2, 7, 7, 64), True),
                                           ((1, 2, 1, 3, 11, 64), True), ((1, 2, 2, 9, 4, 128), True),
                                           ((1, 3, 1, 5, 6, 64), False)])
def test_reference_is_the_definition(shape, causal):
    rng = np.random.default_rng(SEED)
    q, k, v = _inputs(rng, *shape)
    scale = 0.3
    out, lse = A.reference(q, k, v, causal=causal, scale=scale)
    want_out, want_lse = _plain(q, k, v, causal, scale)
    np.testing.assert_allclose(out, want_out, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-12, atol=1e-12)


def test_rows_that_see_no_key():
    """Sq > Sk, causal, bottom-right: query i sees keys j <= i - (Sq - Sk); the first Sq - Sk rows see none."""
    rng = np.random.default_rng(SEED)
    q, k, v = _inputs(rng, 1, 1, 1, 6, 2, 64)
    out, lse = A.reference(q, k, v, causal=True)
    assert list(A.visible_keys(6, 2, True)) == [0, 0, 0, 0, 1, 2]
    assert (out[0, 0, :4] == 0).all() and np.isneginf(lse[0, 0, :4]).all()
    assert np.isfinite(lse[0, 0, 4:]).all()


def test_decode_row_sees_every_key():
    assert list(A.visible_keys(1, 4097, True)) == [4097]
    assert list(A.visible_keys(3, 3, True)) == [1, 2, 3]


def test_flops():
    assert A.flops(2, 3, 5, 7, 64, False) == 4.0 * 2 * 3 * 64 * 5 * 7
    assert A.flops(1, 1, 3, 3, 64, True) == 4.0 * 64 * (1 + 2 + 3)


def arrays(B=2, Hq=4, Hkv=2, Sq=33, Sk=70, D=64, **over):
    shapes = {"q": ((B, Hq, Sq, D), bf16()), "k": ((B, Hkv, Sk, D), bf16()), "v": ((B, Hkv, Sk, D), bf16()),
              "out": ((B, Hq, Sq, D), bf16()), "lse": ((B, Hq, Sq), np.float32)}
    return [over.get(n, FakeDeviceArray(s, d, ptr=(i + 1) << 32)) for i, (n, (s, d)) in enumerate(shapes.items())]


def test_problem_and_plan():
    v0 = A.ATTN_FWD["v0_scalar"]
    p = v0.validate(*arrays(), causal=True)
    assert (p.B, p.Hq, p.Hkv, p.Sq, p.Sk, p.D, p.causal) == (2, 4, 2, 33, 70, 64, True)
    assert p.scale == pytest.approx(1 / 8)
    (ln,) = v0.launches(p)
    assert ln.kernel == "attn_fwd_scalar<64, 64, 32>" and ln.grid == (1, 4, 2) and ln.block == (64, 1, 1)
    assert float(ln.args[-1]) == pytest.approx(1 / 8 * 1.4426950408889634)


def test_plan_v1():
    v1 = A.ATTN_FWD["v1_mma"]
    (ln,) = v1.launches(v1.validate(*arrays(Sq=130, D=128)))
    assert ln.kernel == "attn_fwd_mma<128, 64>" and ln.grid == (3, 4, 2) and ln.block == (128, 1, 1)


@pytest.mark.parametrize("label, D, kernel", [("v2_pipeline", 64, "attn_fwd_pipeline<64, 64, false>"),
                                              ("v2_pipeline", 128, "attn_fwd_pipeline<128, 32, false>"),
                                              ("v3_edge_mask", 128, "attn_fwd_pipeline<128, 32, true>")])
def test_plan_v2_v3(label, D, kernel):
    v = A.ATTN_FWD[label]
    (ln,) = v.launches(v.validate(*arrays(Sq=64, D=D)))
    assert ln.kernel == kernel and ln.grid == (1, 4, 2) and ln.block == (128, 1, 1)


@pytest.mark.parametrize("over, match", [
    ({"q": FakeDeviceArray((2, 4, 33, 64), np.float16)}, "q: expected dtype bfloat16"),
    ({"k": FakeDeviceArray((2, 2, 70, 128), bf16())}, "k: expected shape"),
    ({"v": FakeDeviceArray((2, 2, 71, 64), bf16())}, "v: expected shape"),
    ({"out": FakeDeviceArray((2, 4, 32, 64), bf16())}, "out: expected shape"),
    ({"lse": FakeDeviceArray((2, 4, 33), bf16())}, "lse: expected dtype float32"),
    ({"q": np.zeros((2, 4, 33, 64), np.float32)}, "expected a CUDA device array"),
])
def test_rejects_bad_arrays(over, match):
    with pytest.raises(ValueError, match=match):
        A.ATTN_FWD["v0_scalar"].validate(*arrays(**over))


@pytest.mark.parametrize("kw, match", [(dict(Hq=3, Hkv=2), "multiple of key/value heads"),
                                       (dict(D=96), "head dimension"),
                                       (dict(Sq=0), "must be >= 1")])
def test_rejects_bad_sizes(kw, match):
    with pytest.raises(ValueError, match=match):
        A.ATTN_FWD["v0_scalar"].validate(*arrays(**kw))


@pytest.mark.parametrize("kw, match", [(dict(scale=0.0), "scale"), (dict(scale=float("nan")), "scale"),
                                       (dict(scale=True), "scale"), (dict(causal=1), "causal")])
def test_rejects_bad_keywords(kw, match):
    with pytest.raises(ValueError, match=match):
        A.ATTN_FWD["v0_scalar"].validate(*arrays(), **kw)


def test_rejects_sizes_past_int32():
    with pytest.raises(ValueError, match="2\\^31"):
        A.check_sizes(1, 1, 1, 2**24, 1, 128)


def test_bench_shapes_follow_the_paper():
    from kernels.attention import ladders as L
    shapes = L.bench_shapes(128, True)
    assert shapes[0] == (16, 16, 16, 1024, 1024, 128, 1) and shapes[-1] == (1, 16, 16, 16384, 16384, 128, 1)
    assert all(B * S == 16384 and H * D == 2048 for B, H, _, S, _, D, _ in shapes)
    with pytest.raises(ValueError, match="bench_shapes"):
        L.bench_shapes(96, False)
    assert L.cost((1, 2, 2, 3, 3, 64, 1), "bfloat16") == A.flops(1, 2, 3, 3, 64, True)


def test_ladder_odd_shapes_are_valid_problems():
    from kernels.attention import ladders as L
    for B, Hq, Hkv, Sq, Sk, D, causal in L.ODD:
        A.check_sizes(B, Hq, Hkv, Sq, Sk, D)
        assert causal in (0, 1)
    assert any(c and Sq > Sk for _, _, _, Sq, Sk, _, c in L.ODD)      # rows that see no key
    assert any(Hq != Hkv for _, Hq, Hkv, *_ in L.ODD)                 # GQA / MQA


# --- variable-length batches ---------------------------------------------------------------------------

def _varlen_fakes(Tq, Tk, Hq=4, Hkv=2, D=64):
    shapes = [((Tq, Hq, D), bf16()), ((Tk, Hkv, D), bf16()), ((Tk, Hkv, D), bf16()), ((Tq, Hq, D), bf16()),
              ((Hq, Tq), np.float32)]
    return [FakeDeviceArray(s, d, ptr=(i + 1) << 36) for i, (s, d) in enumerate(shapes)]


@pytest.mark.parametrize("cu,match", [
    (np.array([0, 5, 3, 10], np.int32), "never decrease"),
    (np.array([1, 5, 10], np.int32), "start at 0"),
    (np.array([0, 5, 9], np.int32), "packed length 10"),
    (np.array([0, 5, 10], np.int64), "int32"),
    (np.array([[0, 10]], np.int32), "1-D"),
])
def test_varlen_offsets_are_checked(cu, match):
    with pytest.raises(ValueError, match=match):
        A.varlen_problem(*_varlen_fakes(10, 10), cu, np.array([0, 4, 6, 10], np.int32)[:cu.size])


def test_varlen_problem_reads_the_lengths_and_plans_the_longest():
    p = A.varlen_problem(*_varlen_fakes(300, 350), np.array([0, 1, 300], np.int32), np.array([0, 50, 350], np.int32),
                         causal=True)
    assert (p.B, p.seqlens_q, p.seqlens_k) == (2, (1, 299), (50, 300))
    (ln,) = A.ATTN_FWD_VARLEN["v4_tuned"].launches(p)
    assert ln.grid == (3, 4, 2) and "varlen" in ln.kernel and ln.smem == A.v4_smem(64, A.V4_DEFAULT[64])
    with pytest.raises(ValueError, match="same number of sequences"):
        A.varlen_problem(*_varlen_fakes(300, 350), np.array([0, 300], np.int32), np.array([0, 50, 350], np.int32))
    with pytest.raises(ValueError, match="multiple of key/value heads"):
        A.varlen_problem(*_varlen_fakes(10, 10, Hq=3, Hkv=2), np.array([0, 10], np.int32), np.array([0, 10], np.int32))


def test_varlen_reference_is_the_reference_per_sequence():
    rng = np.random.default_rng(SEED)
    cq, ck = np.array([0, 3, 3, 9], np.int32), np.array([0, 5, 6, 6], np.int32)   # an empty query run, an empty key run
    q = rng.standard_normal((9, 2, 64)).astype(np.float32).astype(bf16())
    k, v = (rng.standard_normal((6, 1, 64)).astype(np.float32).astype(bf16()) for _ in range(2))
    out, lse = A.varlen_reference(q, k, v, cq, ck, causal=True)
    o0, l0 = A.reference(q[0:3].transpose(1, 0, 2)[None], k[0:5].transpose(1, 0, 2)[None],
                         v[0:5].transpose(1, 0, 2)[None], causal=True)
    np.testing.assert_allclose(out[0:3], o0[0].transpose(1, 0, 2))
    np.testing.assert_allclose(lse[:, 0:3], l0[0])
    assert np.all(out[3:] == 0) and np.all(np.isneginf(lse[:, 3:]))          # the last run has no keys


def test_reference_in_head_chunks_equals_the_whole():
    rng = np.random.default_rng(SEED + 1)
    q, k, v = _inputs(rng, 2, 6, 3, 9, 11, 64)
    whole = A.reference(q, k, v, causal=True)
    chunked = A.reference(q, k, v, causal=True, max_scores=2 * 9 * 11)        # two query heads a chunk
    for a, b in zip(whole, chunked):
        np.testing.assert_array_equal(a, b)
