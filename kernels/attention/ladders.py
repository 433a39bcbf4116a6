"""Chapter 15's ladder (utils.ladder.Ladder over :data:`ATTN_FWD`): how to make a problem of a shape, its reference,
its FLOPs, and the peers timed beside the versions: PyTorch's scaled_dot_product_attention restricted to one
backend at a time (``torch.nn.attention.sdpa_kernel``): FlashAttention-2 (``flash``), cuDNN (``cudnn``) and the
math backend (``math``, the unfused reference implementation).

A shape is ``(B, Hq, Hkv, Sq, Sk, D, causal)`` with ``causal`` 0 or 1. The timed configurations follow the
FlashAttention-2 paper's: 16k tokens a batch (``B = 16384 / S``) and a model width of 2048 (``H = 2048 / D``),
sequence lengths 1k-16k, D 64 and 128, causal or not, ``Sq = Sk`` (PyTorch aligns its causal mask top-left, this op
bottom-right: the two agree only there). The ladder checks ``out``; ``lse`` (and rows that see no key, whose lse
is -inf) are checked by tests/gpu/test_attention.py.
"""
from __future__ import annotations

from utils.ladder import Case, Ladder

from . import ATTN_FWD, flops, reference

SEQLENS = (1024, 2048, 4096, 8192, 16384)
TOKENS, WIDTH = 16384, 2048
# odd lengths, one query against 4097 keys, GQA and MQA, causal rows that see no key (Sq > Sk)
ODD = [(1, 1, 1, 1, 1, 64, 0), (1, 2, 1, 17, 17, 64, 1), (1, 2, 2, 1000, 1000, 128, 1),
       (1, 4, 1, 1, 4097, 128, 1), (2, 4, 2, 333, 1000, 64, 0), (1, 2, 1, 300, 100, 128, 1)]


def bench_shapes(D: int, causal: bool, seqlens=SEQLENS) -> list[tuple]:
    """The timed configurations of one head dimension and mask: B = 16k tokens / S, H = 2048 / D heads."""
    if D <= 0 or WIDTH % D or any(TOKENS % s for s in seqlens):
        raise ValueError(f"bench_shapes: D must divide {WIDTH} and every length {TOKENS}, got D={D}, {seqlens}")
    return [(TOKENS // s, WIDTH // D, WIDTH // D, s, s, D, int(causal)) for s in seqlens]


def make(shape, dtype, rng) -> Case:
    """(q, k, v, out, lse): standard-normal bf16 q, k, v from ``rng``, out and lse uninitialised (the ladder poisons
    out before every checked run); ``causal`` as a keyword."""
    import cupy

    from utils.arrays import bf16
    B, Hq, Hkv, Sq, Sk, D, causal = (int(s) for s in shape)
    rs = cupy.random.RandomState(int(rng.integers(2**31)))
    q = rs.standard_normal((B, Hq, Sq, D), dtype=cupy.float32).astype(bf16())
    k, v = (rs.standard_normal((B, Hkv, Sk, D), dtype=cupy.float32).astype(bf16()) for _ in range(2))
    out, lse = cupy.empty((B, Hq, Sq, D), bf16()), cupy.empty((B, Hq, Sq), cupy.float32)
    return Case((q, k, v, out, lse), outputs=(3,), kwargs={"causal": bool(causal)})


def ladder_reference(case: Case):
    q, k, v = case.args[:3]
    return reference(q, k, v, causal=case.kwargs["causal"])[0]


def cost(shape, dtype) -> float:
    B, Hq, _, Sq, Sk, D, causal = shape
    return flops(B, Hq, Sq, Sk, D, bool(causal))


def sdpa_peer(backend: str):
    """A peer factory: PyTorch SDPA with only ``backend`` ("FLASH_ATTENTION", "CUDNN_ATTENTION", "MATH") enabled, on
    the case's q, k, v as torch tensors (no copy); GQA through ``enable_gqa``. Raises where the backend refuses."""
    def factory(case: Case):
        from torch.nn.attention import SDPBackend, sdpa_kernel
        from torch.nn.functional import scaled_dot_product_attention

        from utils.arrays import as_torch
        q, k, v = (as_torch(a) for a in case.args[:3])
        causal, gqa = case.kwargs["causal"], q.shape[1] != k.shape[1]
        if causal and q.shape[2] != k.shape[2]:
            raise ValueError("sdpa peers: PyTorch's causal mask is top-left aligned; compare only Sq == Sk")
        chosen = getattr(SDPBackend, backend)

        def run():
            with sdpa_kernel(chosen):
                return scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
        return run
    return factory


PEERS = {"torch.sdpa.flash": sdpa_peer("FLASH_ATTENTION"), "torch.sdpa.cudnn": sdpa_peer("CUDNN_ATTENTION")}


def fwd_ladder(rec, shapes, *, peers=None, seed: int = 15) -> Ladder:
    """The forward ladder: checked on ODD (out poisoned), timed on ``shapes`` beside ``peers`` (default PEERS;
    add ``{"torch.sdpa.math": sdpa_peer("MATH")}`` where its O(S^2) memory fits)."""
    return Ladder(rec, ATTN_FWD, shapes=shapes, dtypes=["bfloat16"], make=make, reference=ladder_reference,
                  flops=cost, odd_shapes=ODD, peers=PEERS if peers is None else peers, ceiling=None, seed=seed)
