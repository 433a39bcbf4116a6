"""Chapter 17 host side: TMA demo kernels that show what one ``cp.async.bulk.tensor`` does (sm_90).

Two kernels in tma_copy.cu, each one CTA per box of a 2-D tensor map (utils.tma):

- ``tma_copy_load_box_raw``: load the box into shared memory and write the raw shared-memory bytes
  out, so the host sees the swizzle (compared with :func:`utils.tma.smem_image`);
- ``tma_copy_roundtrip``: load the box and store it to a second tensor at the same coordinates;
  edge boxes are zero-filled on the way in and clipped on the way out, the store in whole 16-byte
  chunks of global memory (so up to ``spec.store_spill_bytes`` bytes of padding after each row of the
  destination may be overwritten, with the zero fill).

The references are :func:`reference_smem` (the model's image of every box) and the input itself.
Imports without a GPU; CuPy is imported inside the functions that launch.
"""
from __future__ import annotations

import math

import numpy as np

from utils.build import KernelSource
from utils.check import CheckFailed
from utils.tma import TensorMap, smem_image
from utils.version import Launch, bind_launches

# TMA and mbarrier transaction counts: sm_90 and later (plain sm_90, not the sm_90a-only features).
SOURCE = KernelSource("tma_copy.cu", requires=("tma",))

THREADS = 128                        # TMA_THREADS in tma_copy.cu
SMEM_ALIGN = 1024                    # the kernels round the dynamic buffer up to this (SMEM_ALIGN in the .cu)
MAX_DYNAMIC_SMEM = 227 * 1024        # per block on sm_90
STATUS_TIMEOUT = 1                   # TMA_STATUS_TIMEOUT in tma_copy.cu


def check_map_2d(tmap, name: str):
    """The TiledSpec of a 2-D tensor map the kernels can take; ValueError otherwise."""
    if not isinstance(tmap, TensorMap):
        raise ValueError(f"{name}: expected a utils.tma.TensorMap (utils.tma.tensor_map(x, box=...)), "
                         f"got {type(tmap).__name__}")
    spec = tmap.spec
    if spec.rank != 2:
        raise ValueError(f"{name}: expected a 2-D tensor map, got rank {spec.rank} (shape {spec.shape})")
    if spec.elem_strides != (1, 1):
        raise ValueError(f"{name}: expected element strides (1, 1), got {spec.elem_strides}")
    if spec.smem_bytes + SMEM_ALIGN > MAX_DYNAMIC_SMEM:
        raise ValueError(f"{name}: the box needs {spec.smem_bytes} bytes of shared memory (+{SMEM_ALIGN} to "
                         f"align it), more than the {MAX_DYNAMIC_SMEM} a block may have")
    return spec


def box_grid(spec) -> tuple[int, int, int]:
    """One CTA per box: (boxes along the columns, boxes along the rows, 1)."""
    rows, cols = spec.shape
    box_rows, box_cols = spec.box
    return (math.ceil(cols / box_cols), math.ceil(rows / box_rows), 1)


def plan_load_box_raw(tmap: TensorMap, out, status) -> list[Launch]:
    spec = tmap.spec
    box_rows, box_cols = spec.box
    return [Launch("tma_copy_load_box_raw", box_grid(spec), (THREADS, 1, 1),
                   (tmap.arg, out, np.int32(box_cols), np.int32(box_rows), np.uint32(spec.box_bytes),
                    np.uint32(spec.smem_bytes), status),
                   smem=spec.smem_bytes + SMEM_ALIGN)]


def plan_roundtrip(src: TensorMap, dst: TensorMap, status) -> list[Launch]:
    spec = src.spec
    box_rows, box_cols = spec.box
    return [Launch("tma_copy_roundtrip", box_grid(spec), (THREADS, 1, 1),
                   (src.arg, dst.arg, np.int32(box_cols), np.int32(box_rows), np.uint32(spec.box_bytes),
                    status),
                   smem=spec.smem_bytes + SMEM_ALIGN)]


def load_box_raw(tmap: TensorMap):
    """Launch ``tma_copy_load_box_raw``: return the uint8 [box rows, box columns, smem_bytes] CuPy array
    of every box's shared-memory image (bytes TMA did not write hold 0xA5)."""
    import cupy

    from utils.check import poisoned
    spec = check_map_2d(tmap, "tmap")
    gx, gy, _ = box_grid(spec)
    out = poisoned((gy, gx, spec.smem_bytes), np.uint8, xp=cupy, fill=0x5A)
    status = cupy.zeros(1, dtype=cupy.int32)
    bind_launches(plan_load_box_raw(tmap, out, status), SOURCE)()
    raise_on_status(status, "tma_copy_load_box_raw", spec)
    return out


def roundtrip(src: TensorMap, dst: TensorMap) -> None:
    """Launch ``tma_copy_roundtrip``: every box of ``src``'s tensor is loaded and stored into ``dst``'s.
    Besides the tensor, the store may overwrite ``dst.spec.store_spill_bytes`` bytes after each row."""
    s, d = check_map_2d(src, "src"), check_map_2d(dst, "dst")
    for field in ("dtype", "shape", "box", "swizzle"):
        if getattr(s, field) != getattr(d, field):
            raise ValueError(f"dst: expected the same {field} as src ({getattr(s, field)}), "
                             f"got {getattr(d, field)}")
    import cupy
    status = cupy.zeros(1, dtype=cupy.int32)
    bind_launches(plan_roundtrip(src, dst, status), SOURCE)()
    raise_on_status(status, "tma_copy_roundtrip", s)


def raise_on_status(status, kernel: str, spec) -> None:
    code = int(status.get()[0])
    if code == STATUS_TIMEOUT:
        raise CheckFailed(f"{kernel}: the mbarrier never completed within a second: TMA delivered fewer bytes "
                          f"than the {spec.box_bytes} announced (box {spec.box}, {spec.dtype.name}, "
                          f"swizzle {spec.swizzle})")
    if code:
        raise CheckFailed(f"{kernel}: status {code}")


# --- references ------------------------------------------------------------------------------------

def boxes(x: np.ndarray, box) -> np.ndarray:
    """[box rows, box columns, *box]: every box of the 2-D array ``x``, zero where it passes the edge
    (what TMA's out-of-bounds fill delivers)."""
    rows, cols = x.shape
    br, bc = (int(b) for b in box)
    gy, gx = math.ceil(rows / br), math.ceil(cols / bc)
    padded = np.zeros((gy * br, gx * bc), dtype=x.dtype)
    padded[:rows, :cols] = x
    return padded.reshape(gy, br, gx, bc).transpose(0, 2, 1, 3)


def reference_smem(x: np.ndarray, box, swizzle: int, fill: int = 0xA5) -> tuple[np.ndarray, np.ndarray]:
    """(image, written): what :func:`load_box_raw` returns for the host array ``x``, by the swizzle model,
    as uint8 [box rows, box columns, smem bytes]; ``written`` marks the bytes TMA writes (the rest keep
    the kernel's ``fill``)."""
    return smem_image(boxes(np.ascontiguousarray(x), box), swizzle, fill=fill, batch_dims=2)
