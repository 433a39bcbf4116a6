"""Chapter 16's ladder (utils.ladder.Ladder over :data:`ATTN_BWD`): how to make a backward problem of a shape, its
reference, its FLOPs, and the peers: PyTorch's scaled_dot_product_attention backward restricted to one backend
(``torch.nn.attention.sdpa_kernel``), FlashAttention-2 (``flash``) and cuDNN (``cudnn``), timing only the backward.

Shapes are chapter 15's (``(B, Hq, Hkv, Sq, Sk, D, causal)``, :func:`kernels.attention.ladders.bench_shapes`: 16k
tokens a batch, model width 2048, ``Sq = Sk`` so that PyTorch's top-left causal mask agrees with ours) and its odd
shapes. The FLOPs are 2.5 times the forward's (five products against two: flash-attention's count), whatever a
version recomputes. ``out`` and ``lse`` come from the forward's fastest version on the same inputs.
"""
from __future__ import annotations

from kernels.attention.ladders import ODD, SEQLENS, bench_shapes  # noqa: F401  (re-exported for the chapter)
from utils.ladder import Case, Ladder

from . import ATTN_BWD, flops, reference_grads

FORWARD = "v4_tuned"             # the forward version that writes out and lse for the cases


def make(shape, dtype, rng) -> Case:
    """(q, k, v, out, lse, dout, dq, dk, dv): standard-normal bf16 q, k, v, dout from ``rng``; out and lse from the
    forward; dq, dk, dv uninitialised (the ladder poisons them before every checked run); ``causal`` a keyword."""
    import cupy

    from kernels.attention import ATTN_FWD
    from utils.arrays import bf16
    B, Hq, Hkv, Sq, Sk, D, causal = (int(s) for s in shape)
    rs = cupy.random.RandomState(int(rng.integers(2**31)))
    q, dout = (rs.standard_normal((B, Hq, Sq, D), dtype=cupy.float32).astype(bf16()) for _ in range(2))
    k, v = (rs.standard_normal((B, Hkv, Sk, D), dtype=cupy.float32).astype(bf16()) for _ in range(2))
    out, lse = cupy.empty((B, Hq, Sq, D), bf16()), cupy.empty((B, Hq, Sq), cupy.float32)
    ATTN_FWD[FORWARD](q, k, v, out, lse, causal=bool(causal))
    dq = cupy.empty((B, Hq, Sq, D), bf16())
    dk, dv = cupy.empty((B, Hkv, Sk, D), bf16()), cupy.empty((B, Hkv, Sk, D), bf16())
    return Case((q, k, v, out, lse, dout, dq, dk, dv), outputs=(6, 7, 8), kwargs={"causal": bool(causal)})


def ladder_reference(case: Case):
    q, k, v, _, _, dout = case.args[:6]
    return reference_grads(q, k, v, dout, case.kwargs["causal"])


def cost(shape, dtype) -> float:
    B, Hq, _, Sq, Sk, D, causal = shape
    return flops(B, Hq, Sq, Sk, D, bool(causal))


def sdpa_backward_peer(backend: str):
    """A peer factory: PyTorch SDPA with only ``backend`` ("FLASH_ATTENTION", "CUDNN_ATTENTION") enabled. The forward
    runs once, outside the timing, on leaf tensors that share the case's memory; the timed call is the backward
    alone, ``torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)``, which returns (dq, dk, dv)."""
    def factory(case: Case):
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel
        from torch.nn.functional import scaled_dot_product_attention

        from utils.arrays import as_torch
        q, k, v = (as_torch(a).detach().requires_grad_(True) for a in case.args[:3])
        dout = as_torch(case.args[5])
        causal, gqa = case.kwargs["causal"], q.shape[1] != k.shape[1]
        if causal and q.shape[2] != k.shape[2]:
            raise ValueError("sdpa peers: PyTorch's causal mask is top-left aligned; compare only Sq == Sk")
        with sdpa_kernel(getattr(SDPBackend, backend)):
            out = scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)

        def run():
            return torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
        return run
    return factory


PEERS = {"torch.sdpa.flash": sdpa_backward_peer("FLASH_ATTENTION"),
         "torch.sdpa.cudnn": sdpa_backward_peer("CUDNN_ATTENTION")}


def bwd_ladder(rec, shapes, *, peers=None, seed: int = 16) -> Ladder:
    """The backward ladder: checked on ODD (dq, dk, dv poisoned), timed on ``shapes`` beside ``peers`` (default
    PEERS)."""
    return Ladder(rec, ATTN_BWD, shapes=shapes, dtypes=["bfloat16"], make=make, reference=ladder_reference,
                  flops=cost, odd_shapes=ODD, peers=PEERS if peers is None else peers, ceiling=None, seed=seed)
