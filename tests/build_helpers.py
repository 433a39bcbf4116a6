"""Helpers for the build tests: a scratch kernels/ dir with its own disk cache, BOOK_ARCH emulation, a
fake GPU. Plain functions taking pytest's ``monkeypatch``, so every change is undone after the test."""
from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

import utils.build as b
import utils.gpu as gpu

# A CuTe kernel for the nvcc + CUTLASS include path tests (CPU build, GPU run).
CUTE_SMOKE = """#include <cute/tensor.hpp>
// A 32x32 transpose through shared memory, addressed by a CuTe layout with a padded row (33 floats).
extern "C" __global__ void cute_smoke_transpose(const float* x, float* y) {
  using namespace cute;
  __shared__ float tile[32 * 33];   // [32, 32 + 1] floats in smem
  auto layout = make_layout(make_shape(Int<32>{}, Int<32>{}), make_stride(Int<33>{}, Int<1>{}));
  Tensor s = make_tensor(make_smem_ptr(tile), layout);
  int r = threadIdx.y, c = threadIdx.x;
  s(r, c) = x[r * 32 + c];
  __syncthreads();
  y[r * 32 + c] = s(c, r);
}
"""


def scratch_kernels(monkeypatch, tmp_path: Path) -> Path:
    """Point utils.build at ``tmp_path/kernels`` (with an include/ dir) and an empty disk cache, with
    nothing held in memory; returns the kernels dir."""
    kernels = tmp_path / "kernels"
    (kernels / "include").mkdir(parents=True)
    monkeypatch.setattr(b, "KERNELS", kernels)
    monkeypatch.setattr(b, "INCLUDE", kernels / "include")
    monkeypatch.setattr(b, "REPO", tmp_path)
    monkeypatch.setenv(b.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(b.COMPILE_LOG_ENV, raising=False)
    b.clear_memory_cache()
    return kernels


def emulating(monkeypatch, arch: str | None) -> None:
    """Run the rest of the test as a process started with BOOK_ARCH=arch (None: unset). The variable
    is read once per process, so the test gets a fresh reader; the process's own comes back after."""
    if arch is None:
        monkeypatch.delenv(gpu.ARCH_ENV, raising=False)
    else:
        monkeypatch.setenv(gpu.ARCH_ENV, arch)
    monkeypatch.setattr(gpu, "emulated_arch", functools.cache(gpu.emulated_arch.__wrapped__))


def fake_gpu(monkeypatch, name: str = "NVIDIA H200", cc: tuple[int, int] = (9, 0)) -> None:
    """A GPU as utils.gpu sees it, without CuPy: has_gpu, require_gpu and device_summary."""
    summary = {"name": name, "cc": f"{cc[0]}.{cc[1]}", "major": cc[0], "minor": cc[1],
               "emulated_arch": gpu.emulated_arch()}
    monkeypatch.setattr(gpu, "has_gpu", lambda: True)
    monkeypatch.setattr(gpu, "require_gpu", lambda: None)
    monkeypatch.setattr(gpu, "device_summary", lambda: summary)


def nvcc_or_skip() -> str:
    """nvcc, or skip the test saying what is missing."""
    try:
        return b.find_nvcc()
    except b.ToolchainMissing as e:
        pytest.skip(str(e))


def cutlass_or_skip() -> tuple[str, str]:
    """The CUTLASS include dirs, or skip the test saying what is missing."""
    try:
        return b.cutlass_include_dirs()
    except b.ToolchainMissing as e:
        pytest.skip(str(e))


EXTERN_SHARED = re.compile(r"extern\s+__shared__\s+(?:__align__\(\d+\)\s+)?([\w:][\w:\s]*?)\s+(\w+)\[\];")


def emulated_source(path) -> str:
    """A kernel file with its dynamic shared memory pointed at the emulator's buffer."""
    return EXTERN_SHARED.sub(r"\1* \2 = reinterpret_cast<\1*>(emu_smem);", path.read_text())


def emu_launch_code(ln, args: str) -> str:
    """A tests/emu launch of a plan's Launch ``ln`` with the driver's argument list ``args``."""
    dims = lambda d: "dim3e{" + ", ".join(map(str, d)) + "}"      # noqa: E731
    return f"emu_launch({ln.kernel}, {dims(ln.grid)}, {dims(ln.block)}, {args})"


def run_emulated_driver(tmp_path: Path, head: str, checks, tail: str, sources, include_dirs,
                        timeout_s: int = 600) -> None:
    """Write a tests/emu driver: ``head`` (its ``%(includes)s`` replaced by an #include of each kernel file in
    ``sources``, once each), the ``checks`` lines, ``tail`` (which prints "<n> runs, <f> failures"); build it with
    g++ -std=c++20 against tests/emu and ``include_dirs``, run it, and assert it ran every check with no failure.
    Skips where g++ or its C++20 <barrier> is missing."""
    import shutil
    import subprocess
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ is not installed: the emulated kernels need a C++20 compiler")
    includes = "\n".join(f'#include "{Path(f).name}"' for f in dict.fromkeys(sources))
    (tmp_path / "driver.cpp").write_text(head % {"includes": includes} + "\n".join(checks) + tail)
    emu = Path(__file__).resolve().parent / "emu"
    build = subprocess.run([gxx, "-std=c++20", "-O1", "-pthread", "-w", f"-I{emu}",
                            *(f"-I{d}" for d in include_dirs), "driver.cpp", "-o", "driver"],
                           cwd=tmp_path, capture_output=True, text=True)
    if build.returncode and "barrier" in build.stderr and "No such file" in build.stderr:
        pytest.skip("this g++ has no <barrier> (C++20)")
    assert build.returncode == 0, build.stderr[-3000:]
    run = subprocess.run([str(tmp_path / "driver")], capture_output=True, text=True, timeout=timeout_s)
    assert run.returncode == 0 and f"{len(checks)} runs, 0 failures" in run.stdout, run.stdout[-3000:]
