"""The FlashAttention backward versions (kernels/attention_bwd, chapter 16) on the GPU: every version and every tile
it instantiates on fresh seeded bf16 inputs (out and lse from the forward), dq, dk, dv poisoned, against the float64
reference_grads, on the emulated test's odd cases plus lengths 1000 and 4097; against torch autograd through
scaled_dot_product_attention where Sq == Sk; v1 bit-reproducible. Times nothing. Skips without a GPU. The seed is
in every message."""
import zlib

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
SEED = 1602
# (B, Hq, Hkv, Sq, Sk, D, causal)
CASES = [(1, 1, 1, 1, 1, 64, False), (1, 2, 1, 17, 17, 64, True), (1, 4, 1, 70, 33, 128, True),
         (1, 8, 2, 33, 70, 64, False), (1, 2, 2, 1, 70, 128, True), (1, 1, 1, 139, 204, 64, True),
         (1, 2, 2, 1000, 1000, 128, True), (1, 1, 1, 4097, 4097, 64, True), (1, 4, 1, 1, 4097, 128, True),
         (2, 4, 2, 333, 1000, 64, False), (1, 8, 2, 1000, 1000, 128, False), (1, 2, 1, 300, 100, 128, True)]
IDS = ["B{}-Hq{}-Hkv{}-{}x{}-d{}-{}".format(*c[:6], "causal" if c[6] else "full") for c in CASES]


def _seed(*what) -> int:
    return (SEED * 1_000_003 + zlib.crc32(repr(what).encode())) % 2**31


def _inputs(B, Hq, Hkv, Sq, Sk, D, causal, seed, magnitude=1.0):
    """(q, k, v, out, lse, dout) on the GPU; out and lse written by the forward's fastest version."""
    import cupy

    from kernels.attention import ATTN_FWD
    from utils.arrays import bf16
    rs = cupy.random.RandomState(seed)
    q = (magnitude * rs.standard_normal((B, Hq, Sq, D), dtype=cupy.float32)).astype(bf16())
    k, v = (rs.standard_normal((B, Hkv, Sk, D), dtype=cupy.float32).astype(bf16()) for _ in range(2))
    dout = rs.standard_normal((B, Hq, Sq, D), dtype=cupy.float32).astype(bf16())
    out, lse = cupy.empty((B, Hq, Sq, D), bf16()), cupy.empty((B, Hq, Sq), cupy.float32)
    ATTN_FWD["v4_tuned"](q, k, v, out, lse, causal=causal)
    return q, k, v, out, lse, dout


def _grads(version, inputs, causal, config=None):
    """dq, dk, dv of one poisoned run of ``version``."""
    from kernels import attention_bwd as AB
    from utils.arrays import bf16
    from utils.check import poisoned
    q, k = inputs[0], inputs[1]
    dq = poisoned(q.shape, bf16())
    dk, dv = poisoned(k.shape, bf16()), poisoned(k.shape, bf16())
    AB.ATTN_BWD[version](*inputs, dq, dk, dv, causal=causal, config=config)
    return dq, dk, dv


def _versions():
    """(label, config) of every version and every tile it instantiates."""
    from kernels import attention_bwd as AB
    return [(v.label, c) for v in AB.ATTN_BWD.values() for c in v.all_configs()]


def _check(got, want, what):
    from utils.check import assert_close
    for name, g, w in zip(("dq", "dk", "dv"), got, want):
        assert_close(g, w, dtype="bfloat16", name=f"{what}: {name}")


@pytest.mark.parametrize("case", CASES, ids=IDS)
@pytest.mark.parametrize("version,config", _versions(), ids=str)
def test_matches_the_reference(version, config, case):
    from kernels import attention_bwd as AB
    if config not in AB.TILES[case[5]]:
        pytest.skip(f"{version}: tile {config} is instantiated for another head dimension")
    seed = _seed(version, case)
    inputs = _inputs(*case, seed)
    want = AB.reference_grads(inputs[0], inputs[1], inputs[2], inputs[5], case[6])
    _check(_grads(version, inputs, case[6], config), want, f"{version} {config} {case} (seed {seed})")


@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("version", ["v0_atomic_dq", "v1_deterministic"])
def test_large_logits(version, D):
    """q scaled by 30: scores in the hundreds; P = exp2(s scale_log2 - lse_log2) must stay exact where it matters."""
    from kernels import attention_bwd as AB
    case = (1, 2, 1, 257, 300, D, True)
    seed = _seed(version, "large", case)
    inputs = _inputs(*case, seed, magnitude=30.0)
    want = AB.reference_grads(inputs[0], inputs[1], inputs[2], inputs[5], True)
    _check(_grads(version, inputs, True), want, f"{version} large logits (seed {seed})")


@pytest.mark.parametrize("case", [c for c in CASES if c[3] == c[4]], ids=[i for c, i in zip(CASES, IDS) if c[3] == c[4]])
@pytest.mark.parametrize("version", ["v0_atomic_dq", "v1_deterministic"])
def test_matches_torch_autograd(version, case):
    """The gradients PyTorch's autograd takes through scaled_dot_product_attention (its default backend, fp32
    accumulation), on the same bf16 inputs: both sides against each other, no float64 in between."""
    torch = pytest.importorskip("torch")
    from torch.nn.functional import scaled_dot_product_attention

    from utils.arrays import as_torch, from_torch
    from utils.check import assert_close
    B, Hq, Hkv, Sq, Sk, D, causal = case
    seed = _seed(version, "torch", case)
    inputs = _inputs(*case, seed)
    q, k, v = (as_torch(a).detach().requires_grad_(True) for a in inputs[:3])
    out = scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=Hq != Hkv)
    want = torch.autograd.grad(out, (q, k, v), as_torch(inputs[5]))
    got = _grads(version, inputs, causal)
    for name, g, w in zip(("dq", "dk", "dv"), got, want):
        what = f"{version} {case} vs torch: {name} (seed {seed})"
        if Sk == 1 and name != "dv":
            # One key: P is 1 everywhere, so dS = P (dP - delta) and with it dQ and dK are zero; autograd's are
            # rounding noise (~1e-7), which a relative comparison would take as the answer.
            worst = float(abs(g.astype(np.float32)).max())
            assert worst <= 1e-5, f"{what}: one key, the gradient is zero, but |{name}| reaches {worst:.2e}"
            continue
        assert_close(g, from_torch(w.float()), dtype="bfloat16", name=what)


@pytest.mark.parametrize("D", [64, 128])
def test_v1_is_bit_reproducible(D):
    """Two runs of v1 on the same inputs give the same bits (v0's atomics need not: their order varies)."""
    import cupy
    case = (2, 8, 2, 1000, 1000, D, True)
    inputs = _inputs(*case, _seed("determinism", case))
    first = _grads("v1_deterministic", inputs, True)
    second = _grads("v1_deterministic", inputs, True)
    for name, a, b in zip(("dq", "dk", "dv"), first, second):
        assert bool(cupy.all(a.view(cupy.uint16) == b.view(cupy.uint16))), f"v1 D={D}: {name} differs between runs"


@pytest.mark.parametrize("peer", ["torch.sdpa.flash", "torch.sdpa.cudnn"])
def test_backward_peers_match_the_reference(peer):
    """The ladder's peers run the backward of the backend they name and agree with reference_grads."""
    pytest.importorskip("torch")
    from kernels.attention_bwd import ladders as L
    from utils.check import assert_close
    from utils.ladder import peer_output
    case = L.make((2, 4, 4, 256, 256, 128, 1), "bfloat16", np.random.default_rng(_seed(peer)))
    got = peer_output(L.PEERS[peer](case)())
    for name, g, w in zip(("dq", "dk", "dv"), got, L.ladder_reference(case)):
        assert_close(g, w, dtype="bfloat16", name=f"{peer}: {name}")


# (cu_q, cu_k, Hq, Hkv, D, causal): as the emulated test's, plus sequences of 1000 and 4097 tokens
VARLEN = [([0, 1, 1, 150, 163, 1163], [0, 30, 31, 181, 186, 1186], 4, 1, 64, True),
          ([0, 70, 75, 80, 4177], [0, 40, 170, 170, 4267], 2, 2, 128, False),
          ([0, 1000, 1017, 3000], [0, 1000, 1017, 3000], 8, 2, 128, True)]


@pytest.mark.parametrize("case", VARLEN, ids=["causal-gqa-d64", "full-d128-nokeys", "causal-gqa-d128-long"])
@pytest.mark.parametrize("version", ["v0_atomic_dq", "v1_deterministic"])
def test_varlen_matches_the_reference(version, case):
    """ATTN_BWD_VARLEN on packed batches (out and lse from the forward's varlen entry), dq, dk, dv poisoned: each
    sequence's gradients as the float64 reference of that sequence alone."""
    import cupy

    from kernels import attention as A
    from kernels import attention_bwd as AB
    from utils.arrays import bf16
    from utils.check import poisoned
    cq, ck, Hq, Hkv, D, causal = case
    seed = _seed(version, "varlen", repr(case))
    rs = cupy.random.RandomState(seed)
    q, dout = (rs.standard_normal((cq[-1], Hq, D), dtype=cupy.float32).astype(bf16()) for _ in range(2))
    k, v = (rs.standard_normal((ck[-1], Hkv, D), dtype=cupy.float32).astype(bf16()) for _ in range(2))
    cu_q, cu_k = cupy.asarray(cq, dtype=cupy.int32), cupy.asarray(ck, dtype=cupy.int32)
    out, lse = poisoned(q.shape, bf16()), poisoned((Hq, cq[-1]), np.float32)
    A.ATTN_FWD_VARLEN["v4_tuned"](q, k, v, out, lse, cu_q, cu_k, causal=causal)
    got = poisoned(q.shape, bf16()), poisoned(k.shape, bf16()), poisoned(k.shape, bf16())
    AB.ATTN_BWD_VARLEN[version](q, k, v, out, lse, dout, *got, cu_q, cu_k, causal=causal)
    want = AB.varlen_reference_grads(q, k, v, dout, cu_q, cu_k, causal)
    _check(got, want, f"varlen {version} {case} (seed {seed})")
