"""The FlashAttention forward versions (kernels/attention, chapter 15) on the GPU: every version on fresh seeded
bf16 inputs with out and lse poisoned, against the float64 reference, on the lengths the issue names (1, 17,
1000, 4097, and one query against 4097 keys), both head dimensions, GQA and MQA, causal rows that see no key,
and logits of large magnitude. Times nothing. Skips without a GPU. The seed is in every message."""
import zlib

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
SEED = 1502
# (B, Hq, Hkv, Sq, Sk, D, causal)
CASES = [(1, 1, 1, 1, 1, 64, False), (1, 2, 1, 17, 17, 64, True), (1, 2, 2, 1000, 1000, 128, True),
         (1, 1, 1, 4097, 4097, 64, True), (1, 4, 1, 1, 4097, 128, True), (2, 4, 2, 333, 1000, 64, False),
         (1, 2, 1, 300, 100, 128, True)]


def _seed(*what) -> int:
    return (SEED * 1_000_003 + zlib.crc32(repr(what).encode())) % 2**31


def _run(version, B, Hq, Hkv, Sq, Sk, D, causal, seed, magnitude=1.0, config=None):
    import cupy

    from kernels import attention as A
    from utils.arrays import bf16
    from utils.check import poisoned
    rs = cupy.random.RandomState(seed)
    q = (magnitude * rs.standard_normal((B, Hq, Sq, D), dtype=cupy.float32)).astype(bf16())
    k, v = (rs.standard_normal((B, Hkv, Sk, D), dtype=cupy.float32).astype(bf16()) for _ in range(2))
    out, lse = poisoned((B, Hq, Sq, D), bf16()), poisoned((B, Hq, Sq), np.float32)
    v_ = A.ATTN_FWD[version]
    p = v_.validate(q, k, v, out, lse, causal=causal)
    if config is not None and config not in v_.all_configs(p):
        pytest.skip(f"{version}: tile {config} is instantiated for another head dimension")
    v_(q, k, v, out, lse, causal=causal, config=config)
    return (out, lse), A.reference(q, k, v, causal=causal)


def _check(got, want, what):
    import cupy

    from utils.check import assert_close
    (out, lse), (ref_out, ref_lse) = got, want
    assert_close(out, ref_out, dtype="bfloat16", name=f"{what}: out")
    finite = cupy.isfinite(ref_lse)
    assert bool(cupy.all(cupy.isneginf(lse[~finite]))), f"{what}: rows that see no key must have lse = -inf"
    err = float(cupy.abs(lse[finite] - ref_lse[finite]).max()) if bool(finite.any()) else 0.0
    assert err < 2e-3 * max(1.0, float(cupy.abs(ref_lse[finite]).max())), f"{what}: lse off by {err}"


def _versions():
    """(label, config) of every version and every tile a tuned version instantiates (None: the default)."""
    from kernels import attention as A
    return [(v.label, c) for v in A.ATTN_FWD.values() for c in (v.all_configs() or (None,))]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "B{}-Hq{}-Hkv{}-{}x{}-d{}-{}".format(
    *c[:6], "causal" if c[6] else "full"))
@pytest.mark.parametrize("version,config", _versions(), ids=str)
def test_matches_the_reference(version, config, case):
    seed = _seed(version, case)
    _check(*_run(version, *case, seed, config=config), f"{version} {config} {case} (seed {seed})")


@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("version,config", _versions(), ids=str)
def test_large_logits_stay_finite(version, config, D):
    """q scaled by 30: scores in the hundreds after the 1/sqrt(d) scale; the online max keeps every exp <= 1."""
    case = (1, 2, 1, 257, 300, D, True)
    seed = _seed(version, "large", case)
    _check(*_run(version, *case, seed, magnitude=30.0, config=config), f"{version} {config} large logits (seed {seed})")


@pytest.mark.parametrize("peer", ["torch.sdpa.flash", "torch.sdpa.cudnn"])
def test_sdpa_peers_match_the_reference(peer):
    """The ladder's peers run the backend they name on the case's arrays and agree with the reference."""
    pytest.importorskip("torch")
    from kernels.attention import ladders as L
    from utils.check import assert_close
    from utils.ladder import peer_output
    case = L.make((2, 4, 4, 256, 256, 128, 1), "bfloat16", np.random.default_rng(_seed(peer)))
    got = L.PEERS[peer](case)()
    assert_close(peer_output(got), L.ladder_reference(case), dtype="bfloat16", name=peer)


# (cu_q, cu_k, Hq, Hkv, D, causal): packed batches with an empty run, runs longer than a row tile, Sq > Sk
VARLEN_CASES = [([0, 1, 1, 1000, 1017], [0, 30, 31, 1031, 1041], 4, 1, 64, True),
                ([0, 70, 4167], [0, 3, 4100], 2, 2, 128, False), ([0, 129, 150, 4247], [0, 129, 140, 4237], 4, 2, 128, True)]


@pytest.mark.parametrize("case", VARLEN_CASES, ids=lambda c: f"{len(c[0]) - 1}seqs-d{c[4]}-{'causal' if c[5] else 'full'}")
def test_varlen_matches_the_reference(case):
    import cupy

    from kernels import attention as A
    from utils.arrays import bf16
    from utils.check import assert_close, poisoned
    cq, ck, Hq, Hkv, D, causal = case
    seed = _seed("varlen", case)
    rs = cupy.random.RandomState(seed)
    q = rs.standard_normal((cq[-1], Hq, D), dtype=cupy.float32).astype(bf16())
    k, v = (rs.standard_normal((ck[-1], Hkv, D), dtype=cupy.float32).astype(bf16()) for _ in range(2))
    out, lse = poisoned((cq[-1], Hq, D), bf16()), poisoned((Hq, cq[-1]), np.float32)
    cu_q, cu_k = cupy.asarray(cq, dtype=cupy.int32), cupy.asarray(ck, dtype=cupy.int32)
    A.ATTN_FWD_VARLEN["v4_tuned"](q, k, v, out, lse, cu_q, cu_k, causal=causal)
    ref_out, ref_lse = A.varlen_reference(q, k, v, cu_q, cu_k, causal=causal)
    assert_close(out, ref_out, dtype="bfloat16", name=f"varlen {case} (seed {seed}): out")
    finite = cupy.isfinite(ref_lse)
    assert bool(cupy.all(cupy.isneginf(lse[~finite]))), f"varlen {case} (seed {seed}): rows without keys: lse -inf"
    err = float(cupy.abs(lse[finite] - ref_lse[finite]).max())
    assert err < 2e-3 * max(1.0, float(cupy.abs(ref_lse[finite]).max())), f"varlen {case} (seed {seed}): lse off by {err}"
