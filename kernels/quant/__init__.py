"""Quantization (chapter 9), one package: formats, references and packers (:mod:`.formats`), the INT8 /
FP8 kernels, and three ops with their own version ladders:

- ``int4_convert`` (:mod:`.convert`, :data:`CONVERT`): INT4 -> bf16/fp16 conversion rate, v0-v3;
- ``w4a16_gemv`` (:mod:`.gemv`, :data:`GEMV`): the batch-1 W4A16 GEMV, v0-v6;
- ``w4a16_gemm`` (:mod:`.gemm`, :data:`GEMM`): the tensor-core W4A16 GEMM for batch 1-64, v1-v4.

One .cu file per version under kernels/quant/, shared device code in the headers beside them. The
chapter's measurements live beside the ops, imported on their own: :mod:`.ladders` (the GEMV and GEMM
ladders and their readers), :mod:`.experiments` (ledger, copy line, INT8/FP8, format errors, conversion
rate) and :mod:`.figures`. Importing this package never needs a GPU.
"""
from __future__ import annotations

import re

from .convert import CONVERT, CONVERT_V0_SOURCE, CONVERT_V1_SOURCE, CONVERT_V2_SOURCE, CONVERT_V3_SOURCE  # noqa: F401
from .convert import ORDER as CONVERT_ORDER  # noqa: F401
from .formats import *  # noqa: F401,F403
from .formats import INT8_FP8_SOURCE  # noqa: F401
from .gemm import (  # noqa: F401
    BEST_GEMM,
    GEMM,
    GEMM_V1_SOURCE,
    GEMM_V2_SOURCE,
    GEMM_V3_SOURCE,
    GEMM_V4_SOURCE,
    MARLIN_DEFAULT,
    Marlin,
    gemm_problem,
    marlin_name,
    marlin_stage_bytes,
    stripe_partition,
)
from .gemv import (  # noqa: F401
    BEST_GEMV,
    GEMV,
    GEMV_V0_SOURCE,
    GEMV_V1_SOURCE,
    GEMV_V2_SOURCE,
    GEMV_V3_SOURCE,
    GEMV_V4_SOURCE,
    GEMV_V5_SOURCE,
    GEMV_V6_SOURCE,
    gemv_problem,
)


def sources() -> list:
    """Every KernelSource of the chapter, INT8/FP8 first, then each op's versions in order."""
    return [INT8_FP8_SOURCE, *CONVERT.sources(), *GEMV.sources(), *GEMM.sources()]


# --- reading the SASS (utils.build.sass on a GPU host) ------------------------------------------------

def sass_ops(listing: str) -> list[str]:
    """The opcodes of a cuobjdump/nvdisasm listing, in order (predicates and operands dropped)."""
    ops = []
    for line in listing.splitlines():
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line)
        if m:
            ops.append(m.group(1))
    return ops


def sass_weight_loads_before_math(listing: str) -> int:
    """16-byte evict-first loads (``LDG.E.EF.128``: the GEMV's ``__ldcs`` of qweight) issued before the
    first bf16x2 instruction (``*.BF16_V2``): how many weight loads a thread really has in flight when it
    starts to compute."""
    n = 0
    for op in sass_ops(listing):
        if "BF16_V2" in op:                  # (a bare HFMA2.MMA with RZ operands is a register move)
            break
        n += op.startswith("LDG.E.EF.128")
    return n


def sass_stage_instructions(listing: str) -> int:
    """Instructions from the first ``BAR.SYNC`` to the last ``HMMA``: the body of w4a16_marlin's main loop,
    i.e. what each warp issues per stage (one group of 128 k)."""
    ops = sass_ops(listing)
    bars = [i for i, op in enumerate(ops) if op.startswith("BAR.SYNC")]
    mmas = [i for i, op in enumerate(ops) if op.startswith("HMMA")]
    if not bars or not mmas:
        raise ValueError("expected a listing with a BAR.SYNC and HMMA instructions (w4a16_marlin)")
    return mmas[-1] - bars[0] + 1


def kernel_report() -> dict[str, dict]:
    """ptxas report (registers, smem, spills) of every kernel of the chapter, keyed by readable names: plain
    kernels by their name, template instances by their name expression (``w4a16_marlin<1, 1, 4>``)."""
    from utils.build import compile_source
    report = {}
    for src in sources():
        comp = compile_source(src)
        part = dict(comp.report)
        for expr, mangled in comp.symbols.items():
            if mangled in part:
                part[expr] = part.pop(mangled)
        report.update(part)
    return report
