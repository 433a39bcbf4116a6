"""Array helpers every op family needs: the array module of an array, ceil_div, bfloat16 on the host,
zero-copy interop with PyTorch, and seeded random inputs on the GPU.

Importing this module needs neither CuPy nor PyTorch nor ml_dtypes; each is imported by the function
that uses it.
"""
from __future__ import annotations

import operator
import sys

import numpy as np

# dtypes that cross to PyTorch and back: NumPy/CuPy dtype name -> torch dtype name. bfloat16 has no
# DLPack code every library agrees on, so it travels as its raw 16-bit words (int16) and is viewed back.
TORCH_DTYPES = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16", "int8": "int8",
                "int32": "int32"}
RANDOM_DTYPES = ("float32", "float16", "bfloat16")


def xp(x):
    """The array module of ``x``: ``numpy`` for NumPy arrays and host objects, ``cupy`` for CuPy arrays.

    Never imports CuPy itself: if nothing imported CuPy yet, no CuPy array exists to be asked about.
    """
    if isinstance(x, np.ndarray):
        return np
    cupy = sys.modules.get("cupy")
    return np if cupy is None else cupy.get_array_module(x)


def ceil_div(a: int, b: int) -> int:
    """ceil(a / b) for integers, exactly (no float rounding); ``b`` must be positive."""
    try:
        if isinstance(a, bool) or isinstance(b, bool):
            raise TypeError
        a, b = operator.index(a), operator.index(b)
    except TypeError:
        raise ValueError(f"ceil_div: expected integers, got {a!r} and {b!r}") from None
    if b <= 0:
        raise ValueError(f"ceil_div: expected a positive divisor, got {b}")
    return -(-a // b)


def bf16() -> np.dtype:
    """NumPy's bfloat16 dtype (from ml_dtypes), which CuPy arrays take as well."""
    try:
        import ml_dtypes
    except ImportError as e:
        raise ImportError("bfloat16 arrays on the host need the ml_dtypes package (pip install ml_dtypes; "
                          "it is in requirements.txt)") from e
    return np.dtype(ml_dtypes.bfloat16)


def dtype_name(dtype) -> str:
    """'float32', 'bfloat16', ... for a NumPy/CuPy dtype, a dtype name, or a torch dtype."""
    name = str(dtype)
    if name.startswith("torch."):
        return name[len("torch."):]
    if name == "bfloat16":                     # NumPy knows the name only once ml_dtypes is imported
        return name
    try:
        return np.dtype(dtype).name
    except TypeError:
        raise ValueError(f"expected a dtype, got {dtype!r}") from None


def _expect_interop_dtype(dtype) -> str:
    name = dtype_name(dtype)
    if name not in TORCH_DTYPES:
        raise ValueError(f"expected one of {', '.join(TORCH_DTYPES)} to share with PyTorch, got {name}")
    return name


def as_torch(x):
    """A torch tensor on the same memory as the array ``x`` (CUDA for CuPy, CPU for NumPy): no copy.

    float32, float16, int8 and int32 go through DLPack as they are; bfloat16 goes as int16 words and
    is viewed back as ``torch.bfloat16``.
    """
    name = _expect_interop_dtype(x.dtype)
    import torch
    if name != "bfloat16":
        return torch.from_dlpack(x)
    return torch.from_dlpack(x.view(np.int16)).view(torch.bfloat16)


def from_torch(t):
    """The array on the same memory as the torch tensor ``t``: CuPy for a CUDA tensor, NumPy for a CPU
    one; no copy. The inverse of :func:`as_torch`."""
    name = _expect_interop_dtype(t.dtype)
    import torch
    if t.is_cuda:
        import cupy
        take = cupy.from_dlpack
    else:
        take = np.from_dlpack
    if name != "bfloat16":
        return take(t)
    return take(t.view(torch.int16)).view(bf16())


def random_normal(shape, dtype="float32", seed: int | None = None, scale: float = 1.0):
    """Standard-normal data times ``scale`` on the GPU, as a CuPy array of ``dtype`` (float32, float16 or
    bfloat16; drawn in float32 and rounded). Returns ``(array, seed)``: the seed that reproduces it
    (a fresh one when ``seed`` is None), to print when a check fails."""
    name = dtype_name(dtype)
    if name not in RANDOM_DTYPES:
        raise ValueError(f"random_normal: expected dtype {', '.join(RANDOM_DTYPES)}, got {name}")
    import cupy
    if seed is None:
        seed = int(np.random.SeedSequence().generate_state(1)[0])
    x = cupy.random.RandomState(seed).standard_normal(shape, dtype=cupy.float32)
    if scale != 1.0:
        x *= np.float32(scale)
    target = bf16() if name == "bfloat16" else np.dtype(name)
    return (x if target == np.float32 else x.astype(target)), seed
