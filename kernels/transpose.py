"""Transpose of a 2D fp32 matrix (chapter 4): the reference, the cost model, launchers, versions.

``out[c, r] = x[r, c]`` for a C-contiguous ``rows x cols`` float32 array ``x`` into a C-contiguous
``cols x rows`` array ``out``. Pure data movement: every version must match the reference bit for bit.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from utils.arrays import ceil_div
from utils.build import KernelSource
from utils.ops import expect_array, expect_same_device
from utils.version import Launch, Registry, Unsupported, Version

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


@dataclasses.dataclass(frozen=True)
class TransposeProblem:
    x: object
    out: object
    rows: int
    cols: int


def problem(x, out) -> TransposeProblem:
    """out (cols x rows) = x (rows x cols) transposed: C-contiguous float32 device arrays."""
    expect_array(x, "x", dtype=np.float32, ndim=2)
    rows, cols = (int(s) for s in x.shape)
    if rows < 1 or cols < 1:
        raise ValueError(f"x: expected at least one row and one column, got shape {(rows, cols)}")
    if rows >= 2**31 or cols >= 2**31:
        raise ValueError(f"x: rows and cols must each be below 2**31 (int32 kernel arguments), got {(rows, cols)}")
    expect_array(out, "out", dtype=np.float32, ndim=2, shape=(cols, rows))
    expect_same_device(x, out)
    return TransposeProblem(x, out, rows, cols)


def planner(kernel: str):
    """The plan of one version: its geometry, checked against the grid's y limit."""
    def plan(p: TransposeProblem, config=None) -> list[Launch]:
        grid, block = geometry(kernel, p.rows, p.cols)
        if grid[1] > MAX_GRID_Y:
            raise Unsupported(f"x: shape {(p.rows, p.cols)} needs {grid[1]} blocks along grid y for {kernel}, "
                              f"more than the limit {MAX_GRID_Y}")
        return [Launch(kernel, grid, block, (p.x, p.out, np.int32(p.rows), np.int32(p.cols)))]
    return plan


def version(name: str, summary: str, parent: str | None = None) -> Version:
    number = name.split("_v", 1)[1].split("_", 1)[0]
    return Version(name, summary, SOURCE, planner(name), parent=parent, snippet=f"transpose_v{number}")


VERSIONS = Registry("transpose", problem, [
    version("transpose_v0_naive", "one element per thread; coalesced reads, writes 32 rows apart"),
    version("transpose_v1_naive_colread", "the other way round: strided reads (cached in L1), coalesced writes",
            "v0_naive"),
    version("transpose_v2_smem",
            "32x32 tile in shared memory, 4 elements per thread; column reads of the tile conflict 32-way",
            "v0_naive"),
    version("transpose_v3_smem_padded", "tile padded to [32][33]: conflict-free", "v2_smem"),
    version("transpose_v4_smem_swizzled", "unpadded tile, column XOR row: conflict-free without padding",
            "v2_smem"),
    version("transpose_v5_vec4", "32x128 tile, float4 loads and stores, 4x4 micro-tiles transposed in "
            "registers, swizzled 16-byte chunks", "v4_smem_swizzled"),
    version("transpose_v6_vec4_stream", "v5 with streaming cache hints (__ldcs / __stcs)", "v5_vec4"),
    version("transpose_v7_vec4_colmajor", "v5 with the block order turned: consecutive blocks walk down the rows of x",
            "v5_vec4"),
    version("transpose_v8_vec4_tile64", "v7 with 64x128 tiles: 32 elements per thread, 256-byte runs per row of out",
            "v7_vec4_colmajor"),
])

BEST = "v8_vec4_tile64"   # the chapter finds the fastest version from its own run


def transpose(x, version: str = BEST):
    """Transpose ``x`` with one of :data:`VERSIONS` into a new array (convenience for readers)."""
    import cupy
    expect_array(x, "x", dtype=np.float32, ndim=2)
    out = cupy.empty((x.shape[1], x.shape[0]), dtype=x.dtype)
    return VERSIONS[version](x, out)


# --- the chapter's ladder ---------------------------------------------------------------------------

CHAPTER_SHAPE = (8192, 8192)
ODD_SHAPES = ((1823, 781), (1, 37), (199, 1))     # not multiples of any tile (8, 32, 64, 128)


def make_case(shape, dtype, rng, xp=None):
    """Fresh standard-normal x (rows x cols, float32) and an output buffer: a utils.ladder.Case (NumPy with
    xp=numpy)."""
    from utils.ladder import Case
    if xp is np:
        return Case((rng.standard_normal(tuple(shape), dtype=np.float32), np.empty(shape[::-1], dtype=np.float32)))
    import cupy

    from utils.arrays import random_normal
    x, _ = random_normal(tuple(shape), "float32", seed=int(rng.integers(2**31)))   # drawn on the GPU
    return Case((x, cupy.empty((shape[1], shape[0]), dtype=np.float32)))


def peers() -> dict:
    """What a reader would write instead, on the ladder's own data: CuPy's and PyTorch's contiguous copy of
    the transposed view (PyTorch through DLPack on the same memory; left out where torch is missing)."""
    def cupy_peer(case):
        import cupy
        return lambda: cupy.ascontiguousarray(case.args[0].T)

    out = {"cupy.ascontiguousarray": cupy_peer}
    try:
        import torch  # noqa: F401
    except ImportError:
        return out

    def torch_peer(case):
        from utils.arrays import as_torch, from_torch
        xt = as_torch(case.args[0])
        return lambda: from_torch(xt.t().contiguous())

    out["torch.t().contiguous()"] = torch_peer
    return out


def ladder(rec, shapes=(CHAPTER_SHAPE,), seed: int = 4):
    """Chapter 4's ladder: every version checked bit for bit on ODD_SHAPES (outputs poisoned), timed on
    ``shapes`` beside the peers and the 1 GiB copy of the same run."""
    from utils.ladder import Ladder
    return Ladder(rec, VERSIONS, shapes=shapes, dtypes=["float32"], make=make_case,
                  reference=lambda case: reference(case.args[0]), nbytes=lambda shape, dtype: nbytes(*shape),
                  odd_shapes=ODD_SHAPES, peers=peers(), tol={"float32": 0.0}, ceiling="copy", seed=seed)


def peer_table(entries, copy_gbps: float, predicted: float):
    """The peers' timings (record entries) as a fraction of this run's copy, beside the predicted fraction."""
    from utils.table import Table
    return Table(["peer", "µs", "GB/s", "of copy", "predicted"],
                 [[e["impl"], f"{e['ms'] * 1e3:.0f}", f"{e['metric']:.0f}", f"{e['metric'] / copy_gbps:.1%}",
                   f"{predicted:.0%}"] for e in entries])
