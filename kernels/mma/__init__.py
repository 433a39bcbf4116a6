"""Chapter 12's Ampere-way tensor-core building blocks: ``mma.sync.m16n8k16`` (bf16 in, fp32 accumulate) and
``ldmatrix``, with no op registry: :mod:`.fragments` models on the CPU which lane holds which element (and
draws it), and :data:`PROBE_SOURCE` holds one-warp kernels that dump each lane's registers so the GPU test
compares the hardware with the model. Importing this package never needs a GPU.
"""
from __future__ import annotations

from utils.build import KernelSource

PROBE_SOURCE = KernelSource("mma/probe.cu", requires=("bf16-mma",))
PROBE_KERNELS = ("mma_probe_m16n8k16", "ldmatrix_probe", "accumulators_to_a_probe")


def probe_inputs(seed: int):
    """Inputs in which no lane can hold the wrong element and pass: A [16, 16] and B [16, 8] bf16 with distinct
    values (small integers over 8, signs mixed: exact in bf16, and A @ B exact in fp32), C [16, 8] fp32
    distinct, P [16, 16] fp32 standard normal (exercising bf16 rounding)."""
    import numpy as np

    from utils.arrays import bf16
    rng = np.random.default_rng(seed)
    a = ((rng.permutation(256) - 128) / 8).reshape(16, 16).astype(bf16())
    b = ((rng.permutation(128) - 64) / 8).reshape(16, 8).astype(bf16())
    c = (rng.permutation(128) + 0.5).reshape(16, 8).astype(np.float32)
    p = rng.standard_normal((16, 16)).astype(np.float32)
    return a, b, c, p


def probe_agreement(out: dict, a, b, c, p) -> dict[str, tuple[int, int]]:
    """What :func:`run_probes` returned against the model: per quantity (the registers loaded by the model's
    formulas, D per lane after one mma, ldmatrix.x4 and .x2.trans, the accumulators packed as the next A), the
    number of 32-bit values equal to the model's and the number compared."""
    import numpy as np

    from . import fragments as F
    A, B = a.astype(np.float64), b.astype(np.float64)
    cl = F.mma_c_layout()
    want = {
        "A fragment": F.packed(a, F.mma_a_layout()),
        "B fragment": F.packed(b, F.mma_b_layout()),
        "D = A @ B + C per lane": F.gather(A @ B + c, cl).astype(np.float32),
        "ldmatrix.x4 (A)": F.packed(a, F.ldmatrix_tile_layout(4, False, F.ldmatrix_a_row_addresses())),
        "ldmatrix.x2.trans (B)": F.packed(b, F.ldmatrix_tile_layout(2, True, F.ldmatrix_b_row_addresses())),
        "accumulators as the next A": F.accumulators_to_a(F.gather(p[:, :8], cl), F.gather(p[:, 8:], cl)),
    }
    got = {"A fragment": out["a_regs"], "B fragment": out["b_regs"], "D = A @ B + C per lane": out["d_regs"],
           "ldmatrix.x4 (A)": out["x4_regs"], "ldmatrix.x2.trans (B)": out["x2t_regs"],
           "accumulators as the next A": out["p_regs"]}
    return {k: (int((np.asarray(got[k]) == w).sum()), int(w.size)) for k, w in want.items()}


def run_probes(a, b, c, p):
    """Run the three probes on the GPU: ``a`` [16, 16] and ``b`` [16, 8] bf16, ``c`` [16, 8] and ``p``
    [16, 16] float32 (CuPy or NumPy). Returns a dict of NumPy arrays: ``d`` [16, 8], ``a_regs``
    [32, 4], ``b_regs`` [32, 2], ``c_regs`` and ``d_regs`` [32, 4] from the mma probe; ``x4_regs``
    [32, 4] and ``x2t_regs`` [32, 2] from ldmatrix; ``p_regs`` [32, 4] from the accumulator packing."""
    import cupy as cp
    import numpy as np

    from utils.arrays import bf16
    a = cp.ascontiguousarray(cp.asarray(a, dtype=bf16()))
    b = cp.ascontiguousarray(cp.asarray(b, dtype=bf16()))
    c = cp.ascontiguousarray(cp.asarray(c, dtype=cp.float32))
    p = cp.ascontiguousarray(cp.asarray(p, dtype=cp.float32))
    for name, x, shape in (("a", a, (16, 16)), ("b", b, (16, 8)), ("c", c, (16, 8)), ("p", p, (16, 16))):
        if x.shape != shape:
            raise ValueError(f"{name}: expected shape {shape}, got {x.shape}")
    out = {"d": cp.full((16, 8), cp.nan, cp.float32), "a_regs": cp.zeros((32, 4), cp.uint32),
           "b_regs": cp.zeros((32, 2), cp.uint32), "c_regs": cp.zeros((32, 4), cp.float32),
           "d_regs": cp.zeros((32, 4), cp.float32), "x4_regs": cp.zeros((32, 4), cp.uint32),
           "x2t_regs": cp.zeros((32, 2), cp.uint32), "p_regs": cp.zeros((32, 4), cp.uint32)}
    PROBE_SOURCE.function("mma_probe_m16n8k16")((1,), (32,), (a, b, c, out["d"], out["a_regs"], out["b_regs"],
                                                                out["c_regs"], out["d_regs"]))
    PROBE_SOURCE.function("ldmatrix_probe")((1,), (32,), (a, b, out["x4_regs"], out["x2t_regs"]))
    PROBE_SOURCE.function("accumulators_to_a_probe")((1,), (32,), (p, out["p_regs"]))
    cp.cuda.get_current_stream().synchronize()
    return {k: np.asarray(cp.asnumpy(v)) for k, v in out.items()}
