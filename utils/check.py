"""Correctness: compare an output with a reference in higher precision, and poison outputs.

Works on NumPy and CuPy arrays alike (the arithmetic runs where the arrays live). Every failure
raises :class:`CheckFailed` with the worst elements listed; nothing is print-only.
"""
from __future__ import annotations

import numpy as np

# Relative L2 error a correct kernel stays under, by the precision of its operands.
TOLERANCES = {
    "float64": 1e-12,
    "float32": 1e-5,     # fp32 arithmetic lands far under this; reordered sums sit near 1e-7
    "tf32": 3e-4,
    "float16": 2e-3,
    "bfloat16": 1e-2,    # bf16 operands, fp32 accumulation: 1e-3..1e-2
    "exact": 0.0,        # data movement (copy, transpose): bit-exact
}


class CheckFailed(AssertionError):
    """An output differs from its reference by more than the tolerance, or holds unwritten elements."""


def _xp(a):
    try:
        import cupy
        return cupy.get_array_module(a)
    except Exception:
        return np


def _to_numpy(a):
    return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else np.asarray(a)


def tolerance_for(dtype) -> float:
    name = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
    if name not in TOLERANCES:
        raise ValueError(f"no default tolerance for dtype {name!r}; pass tol= or one of {sorted(TOLERANCES)}")
    return TOLERANCES[name]


def rel_l2_error(out, ref) -> float:
    """||out - ref||_2 / ||ref||_2 in float64 (the absolute error when ref is all zeros)."""
    xp = _xp(out)
    o = out.astype(xp.float64).ravel()
    r = xp.asarray(ref).astype(xp.float64).ravel()
    num = float(xp.linalg.norm(o - r))
    den = float(xp.linalg.norm(r))
    return num / den if den > 0 else num


def poisoned(shape, dtype, xp=None, fill=None):
    """An output buffer filled with NaN (floats) or a sentinel (ints), so unwritten elements show.

    The integer sentinel is the most negative value for signed types (symmetric quantisation never
    produces -128 in int8, for example) and the largest for unsigned ones; pass ``fill`` where a
    kernel may legitimately write that value.
    """
    if xp is None:
        import cupy as xp
    return poison(xp.empty(shape, dtype=np.dtype(dtype)), fill)


def poison(out, fill=None):
    """Fill an existing output buffer in place the way :func:`poisoned` fills a new one; return it."""
    dtype = np.dtype(out.dtype)
    if fill is not None:
        out.fill(fill)
    elif dtype.kind == "f" or dtype.name == "bfloat16":
        out.fill(np.nan)
    elif dtype.kind == "i":
        out.fill(np.iinfo(dtype).min)
    elif dtype.kind == "u":
        out.fill(np.iinfo(dtype).max)
    else:
        raise ValueError(f"cannot poison dtype {dtype}")
    return out


def assert_close(out, ref, *, dtype=None, tol: float | None = None, name: str = "output", worst: int = 5) -> float:
    """Raise CheckFailed unless ``out`` matches ``ref``; return the relative L2 error.

    ``dtype`` (or ``tol``) picks the tolerance: the operands' precision, or "tf32"/"exact".
    Any NaN in ``out`` where ``ref`` is finite fails as unwritten or invalid.
    """
    if tuple(out.shape) != tuple(ref.shape):
        raise CheckFailed(f"{name}: shape {tuple(out.shape)} but the reference has {tuple(ref.shape)}")
    if tol is None:
        tol = tolerance_for(dtype if dtype is not None else out.dtype)
    xp = _xp(out)
    o = out.astype(xp.float64)
    r = xp.asarray(ref).astype(xp.float64)
    bad = ~xp.isfinite(o) & xp.isfinite(r)
    n_bad = int(bad.sum())
    if n_bad:
        first = np.unravel_index(int(xp.argmax(bad.ravel())), out.shape)
        raise CheckFailed(f"{name}: {n_bad} of {out.size} elements are NaN/inf where the reference is finite "
                          f"(unwritten or invalid); first at index {tuple(int(i) for i in first)}")
    err = rel_l2_error(o, r)
    if err > tol or np.isnan(err):
        diff = _to_numpy(xp.abs(o - r)).ravel()
        idx = np.argsort(diff)[::-1][:worst]
        on, rn = _to_numpy(o).ravel(), _to_numpy(r).ravel()
        rows = "\n".join(f"  at {tuple(int(i) for i in np.unravel_index(k, out.shape))}: got {on[k]:.6g}, "
                         f"expected {rn[k]:.6g}" for k in idx)
        raise CheckFailed(f"{name}: relative L2 error {err:.3e} exceeds {tol:.1e}; worst elements:\n{rows}")
    return err
