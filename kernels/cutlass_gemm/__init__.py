"""Chapter 13's peer: a real CUTLASS 3.x sm90 GEMM (``gemm_sm90.cu``), built by nvcc from the nvidia-cutlass wheel's
headers into a shared library and called through ctypes on CuPy's current stream.

CUTLASS builds a kernel's parameters (TMA descriptors included) in host code, so unlike the book's other kernels
this one is not a cubin that CuPy launches: the library's entry point is a host function. The library is built once
per (source, flags, nvcc, CUTLASS version) and kept in the book's compile cache (``utils.build.cache_dir()``).
Importing this package never needs a GPU or nvcc.
"""
from __future__ import annotations

import functools
import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

from utils.paths import KERNELS

SOURCE = "cutlass_gemm/gemm_sm90.cu"
LIBRARY_SOURCES = (SOURCE,)      # .cu files built as shared libraries, not KernelSources (tests/test_compile.py)
ENTRY = "cutlass_hgemm_sm90"
NVCC_FLAGS = ("-std=c++17", "-O3", "-arch=sm_90a", "-DNDEBUG", "--expt-relaxed-constexpr", "-shared",
              "-Xcompiler", "-fPIC")
STATUS = {1: "CUTLASS cannot implement this problem (K and N must be multiples of 8: 16-byte TMA accesses)",
          2: "this configuration would need a workspace, which the wrapper does not allocate",
          3: "CUTLASS failed to initialise the kernel's parameters", 4: "the kernel launch failed"}


def library_key() -> str:
    """sha256 (16 hex digits) of what the library is built from: the source, the flags, nvcc and the headers."""
    from utils.build import cutlass_include_dirs, include_dir_identity, nvcc_version
    h = hashlib.sha256((KERNELS / SOURCE).read_bytes())
    for part in (*NVCC_FLAGS, nvcc_version(), *(include_dir_identity(d) for d in cutlass_include_dirs())):
        h.update(b"\x00" + part.encode())
    return h.hexdigest()[:16]


def library_path() -> Path:
    from utils.build import cache_dir
    return cache_dir() / "libs" / f"cutlass_gemm_{library_key()}.so"


def build_library() -> Path:
    """The built library, compiling it first if the cache has none (a few minutes: CUTLASS is all templates).
    Raises utils.build.ToolchainMissing without nvcc or the CUTLASS headers, CompileError if nvcc fails."""
    from utils.build import CompileError, cutlass_include_dirs, find_nvcc
    out = library_path()
    if out.exists():
        return out
    nvcc = find_nvcc()
    includes = [f"-I{d}" for d in cutlass_include_dirs()]
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fa2-book-cutlass-") as tmp:
        tmp_out = Path(tmp) / out.name
        run = subprocess.run([nvcc, *NVCC_FLAGS, *includes, str(KERNELS / SOURCE), "-o", str(tmp_out)],
                             capture_output=True, text=True)
        if run.returncode:
            raise CompileError(f"{SOURCE} failed to build with nvcc:\n{(run.stdout + run.stderr)[-6000:]}")
        os.replace(tmp_out, out)      # atomic: a concurrent reader sees the whole library or none
    return out


@functools.lru_cache(maxsize=1)
def entry():
    """The library's entry point as a ctypes function (built and loaded once per process)."""
    import ctypes
    lib = ctypes.CDLL(str(build_library()))
    fn = getattr(lib, ENTRY)
    fn.argtypes = [ctypes.c_int] * 3 + [ctypes.c_void_p] * 4
    fn.restype = ctypes.c_int
    return fn


def gemm(a, b, c):
    """``c = a @ b`` (bf16, fp32 accumulation) with CUTLASS's sm90 GEMM on CuPy's current stream; returns ``c``.
    The arrays are validated as for hgemm; K and N must be multiples of 8."""
    import cupy

    from kernels.hgemm import problem, span
    from utils.gpu import require
    require("wgmma")
    p = problem(a, b, c)
    if p.K % 8 or p.N % 8:
        raise ValueError(f"K = {p.K}, N = {p.N}: {STATUS[1]}")
    rc = entry()(p.M, p.N, p.K, span(a)[0], span(b)[0], span(c)[0], int(cupy.cuda.get_current_stream().ptr))
    if rc:
        raise RuntimeError(f"{ENTRY}: {STATUS.get(rc, f'status {rc}')}")
    return c


def peer(case):
    """A ladder peer (utils.ladder): CUTLASS's GEMM on the case's A and B into its own output."""
    import cupy
    a, b, c = case.args
    out = cupy.empty_like(c)
    return lambda: gemm(a, b, out)
