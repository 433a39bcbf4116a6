"""Transpose of a 2D fp32 matrix (chapter 4): the reference, the cost model, launchers, versions.

``out[c, r] = x[r, c]`` for a C-contiguous ``rows x cols`` float32 array ``x`` into a C-contiguous
``cols x rows`` array ``out``. Pure data movement: every version must match the reference bit for bit.
"""
from __future__ import annotations

import numpy as np

from utils.build import KernelSource
from utils.ops import Version, expect_array, expect_same_device, registry

SOURCE = KernelSource("transpose.cu")

MAX_GRID_Y = 65535


def reference(x):
    """The transpose as a new C-contiguous array (NumPy or CuPy, wherever ``x`` lives)."""
    if isinstance(x, np.ndarray):
        return np.ascontiguousarray(x.T)
    import cupy
    return cupy.ascontiguousarray(x.T)


def nbytes(rows: int, cols: int, itemsize: int = 4) -> int:
    """Minimum bytes moved: every element read once and written once."""
    return 2 * itemsize * rows * cols


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


# --- launch geometry of each version: (grid, block) for a rows x cols input ------------------------

def geometry(kernel: str, rows: int, cols: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """Grid and block of ``kernel`` for a ``rows x cols`` input (pure function, tested on the CPU)."""
    if kernel == "transpose_v0_naive":           # threadIdx.x over columns, 1 element per thread
        grid = (ceil_div(cols, 32), ceil_div(rows, 8), 1)
    elif kernel == "transpose_v1_naive_colread":  # threadIdx.x over rows
        grid = (ceil_div(rows, 32), ceil_div(cols, 8), 1)
    elif kernel in ("transpose_v2_smem", "transpose_v3_smem_padded", "transpose_v4_smem_swizzled"):
        grid = (ceil_div(cols, 32), ceil_div(rows, 32), 1)      # one 32x32 tile per block
    elif kernel in ("transpose_v5_vec4", "transpose_v6_vec4_stream"):
        grid = (ceil_div(cols, 128), ceil_div(rows, 32), 1)     # one 32x128 tile per block
    elif kernel == "transpose_v7_vec4_colmajor":                # blockIdx.x walks the row tiles
        grid = (ceil_div(rows, 32), ceil_div(cols, 128), 1)
    elif kernel == "transpose_v8_vec4_tile64":                  # 64x128 tiles, same order
        grid = (ceil_div(rows, 64), ceil_div(cols, 128), 1)
    else:
        raise KeyError(f"unknown transpose kernel {kernel!r}")
    return grid, (32, 8, 1)


def _validate(x, out, kernel: str):
    expect_array(x, "x", dtype=np.float32, ndim=2)
    rows, cols = (int(s) for s in x.shape)
    if rows < 1 or cols < 1:
        raise ValueError(f"x: expected at least one row and one column, got shape {(rows, cols)}")
    if rows >= 2**31 or cols >= 2**31:
        raise ValueError(f"x: rows and cols must each be below 2**31 (int32 kernel arguments), got {(rows, cols)}")
    expect_array(out, "out", dtype=np.float32, ndim=2, shape=(cols, rows))
    expect_same_device(x, out)
    grid, block = geometry(kernel, rows, cols)
    if grid[1] > MAX_GRID_Y:
        raise ValueError(f"x: shape {(rows, cols)} needs {grid[1]} blocks along grid y for {kernel}, "
                         f"more than the limit {MAX_GRID_Y}")
    return rows, cols, grid, block


def _launcher(kernel: str):
    def launch(x, out):
        rows, cols, grid, block = _validate(x, out, kernel)
        SOURCE.function(kernel)(grid, block, (x, out, np.int32(rows), np.int32(cols)))
        return out
    launch.__name__ = f"launch_{kernel}"
    launch.__doc__ = f"Launch {kernel}: out (cols x rows) = x (rows x cols) transposed, fp32."
    return launch


VERSIONS = registry(
    Version("transpose_v0_naive", "v0_naive", _launcher("transpose_v0_naive"),
            "one element per thread; coalesced reads, writes 32 rows apart"),
    Version("transpose_v1_naive_colread", "v1_naive_colread", _launcher("transpose_v1_naive_colread"),
            "the other way round: strided reads (cached in L1), coalesced writes"),
    Version("transpose_v2_smem", "v2_smem", _launcher("transpose_v2_smem"),
            "32x32 tile in shared memory, 4 elements per thread; column reads of the tile conflict 32-way"),
    Version("transpose_v3_smem_padded", "v3_smem_padded", _launcher("transpose_v3_smem_padded"),
            "tile padded to [32][33]: conflict-free"),
    Version("transpose_v4_smem_swizzled", "v4_smem_swizzled", _launcher("transpose_v4_smem_swizzled"),
            "unpadded tile, column XOR row: conflict-free without padding"),
    Version("transpose_v5_vec4", "v5_vec4", _launcher("transpose_v5_vec4"),
            "32x128 tile, float4 loads and stores, 4x4 micro-tiles transposed in registers, swizzled 16-byte chunks"),
    Version("transpose_v6_vec4_stream", "v6_vec4_stream", _launcher("transpose_v6_vec4_stream"),
            "v5 with streaming cache hints (__ldcs / __stcs)"),
    Version("transpose_v7_vec4_colmajor", "v7_vec4_colmajor", _launcher("transpose_v7_vec4_colmajor"),
            "v5 with the block order turned: consecutive blocks walk down the rows of x"),
    Version("transpose_v8_vec4_tile64", "v8_vec4_tile64", _launcher("transpose_v8_vec4_tile64"),
            "v7 with 64x128 tiles: 32 elements per thread, 256-byte runs per row of out"),
)

BEST = "v8_vec4_tile64"   # the chapter finds the fastest version from its own run


def transpose(x, version: str = BEST):
    """Transpose ``x`` with one of :data:`VERSIONS` into a new array (convenience for readers)."""
    import cupy
    expect_array(x, "x", dtype=np.float32, ndim=2)
    out = cupy.empty((x.shape[1], x.shape[0]), dtype=x.dtype)
    return VERSIONS[version].launch(x, out)
