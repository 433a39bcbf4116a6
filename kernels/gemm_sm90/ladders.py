"""Chapter 13's measurements: chapter 12's v8 and the collective v9 beside cuBLAS (``cupy.matmul``) and a real
CUTLASS 3.x sm90 GEMM (:mod:`kernels.cutlass_gemm`), on the same seeded standard-normal bf16 data, through
chapter 12's ladder machinery (its case maker, reference and cost model)."""
from __future__ import annotations

from kernels import cutlass_gemm
from kernels.hgemm import flops, nbytes
from kernels.hgemm import ladders as HL
from utils.ladder import Ladder

from . import COLLECTIVE

# CUTLASS's TMA needs K and N multiples of 8, so chapter 12's unaligned shape is not among them.
SHAPES = [*HL.SQUARE, HL.QKV, HL.MLP_UP]
PEERS = {"cupy.matmul": HL.cublas_peer, "cutlass": cutlass_gemm.peer}


def ladder(rec, shapes=None, *, seed: int = 12) -> Ladder:
    """v8 and v9, checked on chapter 12's odd shapes, timed on ``shapes`` (default :data:`SHAPES`) beside cuBLAS
    and CUTLASS, in TFLOP/s."""
    return Ladder(rec, COLLECTIVE, shapes=list(shapes or SHAPES), dtypes=["bfloat16"], make=HL.make,
                  reference=HL.ladder_reference, nbytes=lambda s, dt: nbytes(*s), flops=lambda s, dt: flops(*s),
                  odd_shapes=HL.ODD_SHAPES, peers=dict(PEERS), ceiling=None, seed=seed)
