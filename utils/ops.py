"""What every kernels/<op>.py shares: input validation for the ops' ``problem`` functions.

The version model itself (Version, Registry, Launch) is :mod:`utils.version`.

CuPy checks no kernel argument itself: a wrong dtype or a strided view is read as raw bytes. Every
launcher therefore calls :func:`expect_array` on each argument and gets a ValueError that says what
was expected and what came.
"""
from __future__ import annotations

import numpy as np


def _describe(x) -> str:
    t = type(x)
    return f"{t.__module__}.{t.__qualname__}"


def expect_array(x, name: str, *, dtype=None, ndim: int | None = None, shape=None,
                 contiguous: bool = True, align: int = 16):
    """Check one kernel argument; return it unchanged.

    ``dtype``: a dtype or a tuple of allowed dtypes. ``shape``: a tuple where None matches any size.
    ``align``: required byte alignment of the data pointer (16 for 16-byte vector loads).
    Accepts any object with ``__cuda_array_interface__`` (CuPy, PyTorch via DLPack-wrapped CuPy).
    """
    cai = getattr(x, "__cuda_array_interface__", None)
    if cai is None:
        raise ValueError(f"{name}: expected a CUDA device array (cupy.ndarray), got {_describe(x)}; "
                         "move it with cupy.asarray(...)")
    if dtype is not None:
        allowed = dtype if isinstance(dtype, tuple) else (dtype,)
        allowed = tuple(np.dtype(d) for d in allowed)
        if np.dtype(x.dtype) not in allowed:
            names = " or ".join(d.name for d in allowed)
            raise ValueError(f"{name}: expected dtype {names}, got {np.dtype(x.dtype).name}")
    if ndim is not None and x.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {tuple(x.shape)}")
    if shape is not None:
        if len(shape) != x.ndim or any(s is not None and s != t for s, t in zip(shape, x.shape)):
            want = "(" + ", ".join("*" if s is None else str(s) for s in shape) + ")"
            raise ValueError(f"{name}: expected shape {want}, got {tuple(x.shape)}")
    if contiguous and not _is_c_contiguous(cai, x):
        raise ValueError(f"{name}: expected a C-contiguous array, got strides {cai.get('strides')} for "
                         f"shape {tuple(x.shape)}; pass x.copy() or cupy.ascontiguousarray(x)")
    ptr = cai["data"][0]
    if align and ptr % align:
        raise ValueError(f"{name}: expected a {align}-byte aligned pointer, got {ptr:#x} "
                         f"(an offset view?); pass a fresh allocation")
    return x


def _is_c_contiguous(cai: dict, x) -> bool:
    strides = cai.get("strides")
    if strides is None:
        return True
    expected, acc = [], np.dtype(x.dtype).itemsize
    for s in reversed(tuple(x.shape)):
        expected.append(acc)
        acc *= s
    return all(a == b or n == 1 for a, b, n in zip(strides, reversed(expected), x.shape))


def expect_same_device(*arrays) -> None:
    devs = {getattr(getattr(a, "device", None), "id", None) for a in arrays}
    if len(devs) > 1:
        raise ValueError(f"all arrays must live on one device, got devices {sorted(map(str, devs))}")
