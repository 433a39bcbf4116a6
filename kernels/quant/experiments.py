"""Chapter 9's measurements outside the two ladders: the ledger, the time-vs-bytes line of a copy, the INT8
and FP8 kernels checked and timed beside PyTorch eager, the error of the three formats, the INT4 conversion
rate, and the occupancy of GEMV v1. The notebook makes one call per experiment and keeps the predictions,
the glue and the judgements; the loops, checks and tables live here.

Functions that time need a GPU (they import CuPy inside); the tables, the line fit and the format errors
also run on NumPy arrays, so the host tests cover them.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from utils.arrays import xp as array_module
from utils.check import CheckFailed, assert_close, poisoned, rel_l2_error
from utils.table import Table

from .convert import CONVERT
from .convert import OUTPUT as CONVERT_OUTPUT
from .formats import (
    BF16,
    convert_ops,
    dequantize_int4,
    fp8_decode,
    fp8_dequant_nbytes,
    fp8_quant_nbytes,
    fp8_reference,
    gemv_bf16_nbytes,
    gemv_flops,
    gemv_nbytes,
    int8_dequant_nbytes,
    int8_dequant_reference,
    int8_quant_nbytes,
    int8_reference,
    launch_fp8_dequant,
    launch_fp8_quant,
    launch_int8_dequant,
    launch_int8_quant,
    quantize_int4,
)


def bf16_normal(shape, std: float = 1.0, seed: int = 0):
    """Seeded standard-normal data (times ``std``) in bf16, on the GPU."""
    import cupy
    return (cupy.random.RandomState(seed).standard_normal(shape, dtype=cupy.float32) * std).astype(BF16)


# --- 9.1 the ledger and the straight line of time against bytes --------------------------------------

def ledger_table(K: int, N: int, copy_gbps: float, hbm_tbps: float) -> Table:
    """Bytes, FLOP/B and the floor at the measured 1 GiB copy rate of the batch-1 GEMV with bf16 and with
    INT4 g128 weights; the caption gives the copy rate against the datasheet's HBM figure."""
    rows = []
    for name, nbytes in (("bf16 weights", gemv_bf16_nbytes(K, N)), ("INT4 g128 weights", gemv_nbytes(K, N))):
        rows.append([name, f"{nbytes / 1e6:.1f} MB", f"{gemv_flops(K, N) / nbytes:.2f}",
                     f"{nbytes / copy_gbps / 1e3:.1f} µs"])
    caption = (f"device-to-device copy (1 GiB): {copy_gbps:.0f} GB/s ({copy_gbps / (hbm_tbps * 1e3):.0%} of the "
               f"{hbm_tbps} TB/s datasheet figure)")
    return Table([f"GEMV 1 x {K} x {N}", "bytes", "FLOP/B", "floor at the 1 GiB copy rate"], rows, caption=caption)


@dataclasses.dataclass(frozen=True)
class Line:
    """time = ``fixed_us`` + bytes / ``gbps``: the straight line fitted to (bytes, µs) points."""
    fixed_us: float
    gbps: float

    def us(self, nbytes: float) -> float:
        """The time the line gives for ``nbytes``."""
        return self.fixed_us + nbytes / self.gbps / 1e3

    def __str__(self) -> str:
        return f"{self.fixed_us:.1f} us + bytes / {self.gbps / 1e3:.2f} TB/s"


def fit_line(nbytes, us) -> Line:
    """Least-squares line through (bytes, µs): the intercept is the fixed part, the slope the bandwidth."""
    nbytes, us = np.asarray(nbytes, dtype=float), np.asarray(us, dtype=float)
    if len(nbytes) < 2 or len(nbytes) != len(us):
        raise ValueError(f"fit_line needs two or more (bytes, us) pairs, got {len(nbytes)} and {len(us)} values")
    slope, fixed = np.polyfit(nbytes, us, 1)              # us per byte, us
    if not slope > 0:
        raise ValueError(f"time does not grow with bytes (slope {slope:.3g} us/B): no bandwidth to read off")
    return Line(float(fixed), float(1e-3 / slope))        # bytes per us -> GB/s


def copy_sweep(rec, mb_moved) -> tuple[np.ndarray, np.ndarray]:
    """Time a device-to-device copy moving each of ``mb_moved`` MB (read + written; op ``copy_same_bytes``)
    under the book's bench; return (bytes moved, µs) as arrays."""
    from utils.hardware import measure_copy_same_bytes
    copies = [measure_copy_same_bytes(rec, int(mb * 1e6) // 2) for mb in mb_moved]
    return np.array([e["bytes"] for e in copies], dtype=float), np.array([e["ms"] * 1e3 for e in copies])


# --- 9.2 INT8 and FP8: checked bit for bit, then timed beside PyTorch eager ---------------------------

INT8_ODD = [(37, 999), (1, 8), (5, 1)]       # K not a multiple of 8 takes the scalar path; one row; one column
FP8_ODD = [(1823, 781), (7,), (3, 5, 9)]     # tails that are not a multiple of 8


@dataclasses.dataclass
class RoundTrip:
    """A format's kernels run once on ``w`` and checked: the codes and scale(s) with their references, and
    the dequantized tensor. The timing runs the same kernels on the same buffers."""
    fmt: str                # "int8" or "fp8"
    w: object               # bf16 input
    q: object
    scale: object
    q_ref: object
    scale_ref: object
    back: object            # bf16, dequantized from q
    amax_bits: object = None    # fp8: the uint32 scratch of fp8_amax


def torch_int8_eager(wt):
    """INT8 per-channel quantization as PyTorch eager writes it: every step a kernel over the whole tensor,
    the intermediates in fp32."""
    import torch
    amax = wt.abs().amax(dim=1, keepdim=True).float()
    inv = torch.where(amax > 0, 127.0 / amax, torch.zeros_like(amax))
    return torch.round(wt.float() * inv).clamp_(-127, 127).to(torch.int8), (amax / 127.0).squeeze(1)


def torch_fp8_eager(wt):
    """Per-tensor FP8 e4m3 quantization as PyTorch eager writes it (abs, amax, multiply, convert)."""
    import torch
    amax = wt.abs().amax().float()
    return (wt.float() * (448.0 / amax)).to(torch.float8_e4m3fn), amax / 448.0


def check_int8(w, odd_shapes=INT8_ODD) -> RoundTrip:
    """Quantize ``w`` [N, K] bf16 with int8_quant_rowwise into poisoned buffers: codes and scales must match
    the NumPy-order reference bit for bit, on ``w`` and on ``odd_shapes`` (fresh seeded inputs); dequantize
    and compare; PyTorch eager's codes must agree within the rounding of 127 / amax."""
    import cupy
    import torch
    N, K = (int(d) for d in w.shape)
    q, s = poisoned((N, K), np.int8), poisoned((N,), np.float32)
    launch_int8_quant(w, q, s)
    q_ref, s_ref = int8_reference(w)
    assert_close(s, s_ref, dtype="exact", name="int8 scales")
    assert_close(q, q_ref, dtype="exact", name="int8 codes")
    for shape in odd_shapes:
        wo = bf16_normal(shape)
        qo, so = poisoned(shape, np.int8), poisoned((shape[0],), np.float32)
        launch_int8_quant(wo, qo, so)
        qr, sr = int8_reference(wo)
        assert_close(qo, qr, dtype="exact", name=f"int8 codes {shape}")
        assert_close(so, sr, dtype="exact", name=f"int8 scales {shape}")
    back = poisoned((N, K), BF16)
    launch_int8_dequant(q, s, back)
    assert_close(back, int8_dequant_reference(q_ref, s_ref), dtype="bfloat16", name="int8 dequant")
    tq, _ = torch_int8_eager(torch.from_dlpack(w))
    assert_close(cupy.from_dlpack(tq), q, tol=1e-3, name="torch int8 codes vs ours")
    return RoundTrip("int8", w, q, s, q_ref, s_ref, back)


def check_fp8(w, odd_shapes=FP8_ODD) -> RoundTrip:
    """Quantize ``w`` (bf16, any shape) with fp8_amax + fp8_quant into poisoned buffers: the scale must be
    amax / 448 and the codes torch.float8_e4m3fn's bit for bit, on ``w`` and on ``odd_shapes``; dequantize
    and compare; PyTorch eager's codes must agree within rounding."""
    import cupy
    import torch
    q, s = poisoned(tuple(w.shape), np.uint8), poisoned((1,), np.float32)
    amax_bits = cupy.empty(1, dtype=cupy.uint32)
    launch_fp8_quant(w, q, s, amax_bits)
    q_ref, s_ref = fp8_reference(w)
    if float(s[0]) != float(s_ref):
        raise CheckFailed(f"fp8 scale: kernel {float(s[0])!r}, amax / 448 = {float(s_ref)!r}")
    assert_close(q, q_ref, dtype="exact", name="fp8 codes vs torch.float8_e4m3fn")
    for shape in odd_shapes:
        xo = bf16_normal(shape)
        qo, so = poisoned(shape, np.uint8), poisoned((1,), np.float32)
        launch_fp8_quant(xo, qo, so, amax_bits)
        qr, _ = fp8_reference(xo)
        assert_close(qo, qr, dtype="exact", name=f"fp8 codes {shape}")
    back = poisoned(tuple(w.shape), BF16)
    launch_fp8_dequant(q, s, back)
    assert_close(back, fp8_decode(q_ref) * s_ref, dtype="bfloat16", name="fp8 dequant")
    tq, _ = torch_fp8_eager(torch.from_dlpack(w))
    assert_close(fp8_decode(cupy.from_dlpack(tq.view(torch.uint8))), fp8_decode(q), tol=1e-3,
                 name="torch fp8 vs ours")
    return RoundTrip("fp8", w, q, s, q_ref, s_ref, back, amax_bits)


def round_trip_entries(fmt: str, shape) -> list[dict]:
    """What :func:`time_round_trip` records for format ``fmt`` ("int8" or "fp8") on a tensor of ``shape``, in
    order: quantize (ours, PyTorch eager), dequantize (ours, PyTorch eager), each as op, impl, dtype, the
    ledger's bytes and whether it is a peer."""
    if fmt == "int8":
        N, K = (int(d) for d in shape)
        ops, dtypes = ("int8_quant", "int8_dequant"), ("bfloat16", "int8")
        impls = ("int8_quant_rowwise", "int8_dequant_rowwise")
        nbytes = (int8_quant_nbytes(N, K), int8_dequant_nbytes(N, K))
    elif fmt == "fp8":
        n = int(np.prod(shape))
        ops, impls, dtypes = ("fp8_quant", "fp8_dequant"), ("fp8_quant", "fp8_dequant"), ("bfloat16", "fp8_e4m3")
        nbytes = (fp8_quant_nbytes(n), fp8_dequant_nbytes(n))
    else:
        raise ValueError(f"unknown format {fmt!r}: expected 'int8' or 'fp8'")
    return [{"op": op, "impl": impl, "dtype": dt, "nbytes": nb, "is_peer": is_peer}
            for op, ours, dt, nb in zip(ops, impls, dtypes, nbytes)
            for impl, is_peer in ((ours, False), ("torch.eager_ops", True))]


def round_trip_calls(r: RoundTrip) -> list[tuple]:
    """(launch, check after timing or None) for each entry of :func:`round_trip_entries`, in the same order:
    our kernels on r's buffers, PyTorch eager on the same memory viewed as torch tensors."""
    import torch
    wt, tq, ts = torch.from_dlpack(r.w), torch.from_dlpack(r.q), torch.from_dlpack(r.scale)

    def codes():
        assert_close(r.q, r.q_ref, dtype="exact", name=f"{r.fmt} codes (timed)")

    if r.fmt == "int8":
        return [(lambda: launch_int8_quant(r.w, r.q, r.scale), codes),
                (lambda: torch_int8_eager(wt), None),
                (lambda: launch_int8_dequant(r.q, r.scale, r.back), None),
                (lambda: (tq.float() * ts[:, None]).to(torch.bfloat16), None)]
    tq8 = tq.view(torch.float8_e4m3fn)
    return [(lambda: launch_fp8_quant(r.w, r.q, r.scale, r.amax_bits), codes),
            (lambda: torch_fp8_eager(wt), None),
            (lambda: launch_fp8_dequant(r.q, r.scale, r.back), None),
            (lambda: (tq8.float() * ts).to(torch.bfloat16), None)]


def time_round_trip(rec, r: RoundTrip) -> list[tuple[dict, dict]]:
    """Time our quantize and dequantize kernels and PyTorch eager's on the same tensor, recorded; returns
    [(ours, eager) for quantize, (ours, eager) for dequantize]."""
    shape = tuple(int(d) for d in r.w.shape)
    entries = [rec.time(m["op"], m["impl"], fn, dtype=m["dtype"], shape=shape, nbytes=m["nbytes"],
                        is_peer=m["is_peer"], check=check)
               for m, (fn, check) in zip(round_trip_entries(r.fmt, shape), round_trip_calls(r))]
    return [(entries[0], entries[1]), (entries[2], entries[3])]


def streaming_table(pairs, copy_gbps: float, predicted: dict) -> Table:
    """(ours, peer) entry pairs as a table: time, GB/s, fraction of the 1 GiB copy against the prediction
    (``predicted`` by impl), and how many times faster ours is than the peer."""
    rows = []
    for e, p in pairs:
        frac, pred = e["metric"] / copy_gbps, predicted[e["impl"]]
        rows.append([e["op"], e["impl"], f"{e['ms'] * 1e3:.1f}", f"{e['metric']:.0f}", f"{frac:.0%}",
                     f"{pred:.0%}", f"{frac / pred:.2f}", f"{p['ms'] * 1e3:.1f}", f"{p['ms'] / e['ms']:.1f}x"])
    peer = pairs[0][1]["impl"] if pairs else "peer"
    return Table(["op", "ours", "µs", "GB/s", "of copy", "predicted", "measured / predicted", f"{peer} µs",
                  "ours faster"], rows, align="ll" + "r" * 7)


# --- 9.2 the error of the three formats -----------------------------------------------------------

INT4_BITS = 4 + 2.5 * 8 / 128          # a nibble, plus a bf16 scale and a 4-bit zero per 128 weights


def format_errors(w) -> dict[str, tuple[float, float]]:
    """{format: (bits per weight, relative L2 error)} after quantizing ``w`` [K, N] (bf16) to each format and
    back: INT8 with one scale per output channel (column n of W), FP8 e4m3 per tensor, INT4 g128
    asymmetric. NumPy or CuPy."""
    xp = array_module(w)
    wf = w.astype(xp.float32)
    qi8, si8 = int8_reference(wf.T.copy())                  # channels along N: quantize the rows of W^T
    err_int8 = rel_l2_error(int8_dequant_reference(qi8, si8).T, wf)
    qf, sf = fp8_reference(w)
    err_fp8 = rel_l2_error(fp8_decode(qf) * sf, wf)
    q4, s4, z4 = quantize_int4(wf)
    err_int4 = rel_l2_error(dequantize_int4(q4, s4.astype(BF16), z4), wf)
    return {"int8 per-channel": (8, err_int8), "fp8 e4m3 per-tensor": (8, err_fp8),
            "int4 g128 asymmetric": (INT4_BITS, err_int4)}


def error_table(errors: dict, predicted: dict) -> Table:
    """The errors of :func:`format_errors` beside the predictions (by format name)."""
    return Table(["format", "bits per weight", "relative L2 error", "predicted"],
                 [[name, f"{bits:.3g}", f"{err:.2%}", f"{predicted[name]:.1%}"]
                  for name, (bits, err) in errors.items()])


# --- 9.4 the conversion rate -------------------------------------------------------------------------

def convert_threads(sms: int) -> int:
    """Threads of one conversion benchmark launch: 4 full waves of 2048 threads per SM."""
    return sms * 2048 * 4


def convert_rates(rec, sms: int, clk_hz: float, *, seed: int = 9) -> dict[str, float]:
    """Check every int4_convert version on the same random codes (seeded; outputs poisoned, bit-exact), then
    time it (recorded, metric µs); return its rate in nibbles converted per clock per SM at ``clk_hz``."""
    import cupy
    vec = convert_threads(sms)
    words = 4 * vec
    vals = cupy.random.RandomState(seed).randint(0, 16, words * 8, dtype=cupy.int32).astype(cupy.uint8)
    ref = vals.astype(cupy.float32)
    sink = cupy.zeros(1, dtype=cupy.uint32)
    per_clk = {}
    for label, v in CONVERT.items():
        (packed,) = v.prepare(vals)
        out = poisoned((words * 8,), np.float16 if CONVERT_OUTPUT[label] == "float16" else BF16)
        run = v.bind(packed, out, sink)
        run()
        assert_close(out, ref, dtype="exact", name=f"int4 conversion {label} (seed {seed})")
        e = rec.time("int4_convert", label, run, dtype="int4", shape=(words * 8,), metric_name="us",
                     check=lambda out=out, label=label: assert_close(out, ref, dtype="exact",
                                                                     name=f"{label} (timed)"))
        per_clk[label] = nibbles_per_clock(convert_ops(vec), e["ms"], sms, clk_hz)
    return per_clk


def nibbles_per_clock(nibbles: int, ms: float, sms: int, clk_hz: float) -> float:
    """Conversion rate per SM per clock: nibbles / time / (SMs x clock)."""
    return nibbles / (ms * 1e-3) / (sms * clk_hz)


def convert_table(rec, per_clk: dict, predicted: dict) -> Table:
    """Time, measured and predicted rate and the speed-up over v0 of every conversion version."""
    base = per_clk["v0_naive"]
    return Table(["version", "µs", "nibbles per clock per SM (nominal clock)", "predicted", "vs v0"],
                 [[lab, f"{rec.get('int4_convert', lab)['ms'] * 1e3:.0f}", f"{r:.1f}", predicted[lab],
                   f"{r / base:.2f}x"] for lab, r in per_clk.items()])


# --- 9.5 why GEMV v1 is latency bound ---------------------------------------------------------------

GEMV_V1_SMEM = 32 * 33 * 4              # bytes: v1's block sums 32 k-slices of 32 columns (padded to 33)


def gemv_v1_occupancy(ladder, shape, sms: int) -> str:
    """One line: v1's registers (ptxas), the blocks per SM they allow and what limits them, the grid in waves."""
    from utils.occupancy import blocks_per_sm

    from . import kernel_report
    report = kernel_report()
    v = ladder.registry["v1_magic"]
    ln = v.launches(ladder.registry.problem(*ladder.case(shape, "bfloat16")[0].args))[0]
    regs = report[ln.kernel]["registers"]
    occ = blocks_per_sm(ln.threads, regs, smem_static=GEMV_V1_SMEM)
    return (f"{ln.kernel}: {regs} registers -> {occ.blocks} blocks of {ln.threads} per SM (limited by "
            f"{occ.limiter}); grid {ln.blocks} blocks -> {ln.blocks / (occ.blocks * sms):.2f} waves")
