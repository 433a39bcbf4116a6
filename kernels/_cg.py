"""Build support for kernels that include <cooperative_groups.h> (chapter 3's sources).

<cooperative_groups.h> includes CCCL's <nv/target>. The pip CUDA runtime headers that
``utils.build.cuda_include_dirs()`` finds carry cooperative_groups but not CCCL, so these sources add
CCCL's include directory to the NVRTC options. Private module (leading underscore): it declares no
kernels of its own.
"""
from __future__ import annotations

import dataclasses
import functools
import os

from utils.build import CompileError, KernelSource


def _has_nv_target(d) -> bool:
    return bool(d) and os.path.exists(os.path.join(str(d), "nv", "target"))


@functools.lru_cache(maxsize=None)
def cccl_include_dir() -> str | None:
    """A directory holding CCCL's ``nv/target``: the CUDA toolkit's or the nvidia-cuda-cccl wheel's
    (through cuda.pathfinder), else the copy CuPy ships, else /usr/local/cuda. None if there is none."""
    try:
        from cuda.pathfinder import find_nvidia_header_directory
        d = find_nvidia_header_directory("cccl")
        if _has_nv_target(d):
            return str(d)
    except Exception:
        pass
    try:
        import importlib.util
        spec = importlib.util.find_spec("cupy")
        for base in (spec.submodule_search_locations or []) if spec else []:
            d = os.path.join(base, "_core", "include", "cupy", "_cccl", "libcudacxx")
            if _has_nv_target(d):
                return d
    except Exception:
        pass
    for env in ("CUDA_PATH", "CUDA_HOME"):
        root = os.environ.get(env)
        if root:
            for d in (os.path.join(root, "include", "cccl"), os.path.join(root, "include")):
                if _has_nv_target(d):
                    return d
    for d in ("/usr/local/cuda/include/cccl", "/usr/local/cuda/include"):
        if _has_nv_target(d):
            return d
    return None


@dataclasses.dataclass(frozen=True)
class CgKernelSource(KernelSource):
    """A :class:`utils.build.KernelSource` whose device code includes <cooperative_groups.h>."""

    def program_options(self, arch: str, ptxas_verbose: bool = True):
        opts = super().program_options(arch, ptxas_verbose)
        d = cccl_include_dir()
        if d is None:
            raise CompileError(f"{self.file} includes <cooperative_groups.h>, which needs CCCL's <nv/target>; "
                               "no CCCL headers found (pip install nvidia-cuda-cccl, or a CUDA toolkit)")
        return dataclasses.replace(opts, include_path=[*opts.include_path, d])
