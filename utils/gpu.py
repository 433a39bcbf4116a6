"""Is there a GPU, what is it, and what can it do.

Errors raised here render as one line in Jupyter (``_render_traceback_``), so a reader on a machine
without the hardware sees a sentence instead of a traceback wall.
"""
from __future__ import annotations

import functools
import re


class OneLineError(RuntimeError):
    """An error that IPython shows as a single line instead of a traceback."""

    def _render_traceback_(self):  # IPython hook
        return [f"{type(self).__name__}: {self}"]


class NoGPU(OneLineError):
    """No usable CUDA GPU (or no CuPy) on this machine."""


class MissingFeature(OneLineError):
    """The GPU is there but lacks what a cell needs (for example wgmma on an A100)."""


@functools.lru_cache(maxsize=None)
def _probe() -> tuple[bool, str]:
    try:
        import cupy  # noqa: F401
    except Exception as e:  # ImportError, or a CUDA library missing
        return False, f"CuPy cannot be imported ({type(e).__name__}: {e})"
    try:
        import cupy
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:
        return False, f"CUDA reports no usable device ({type(e).__name__})"
    if n == 0:
        return False, "CUDA reports no device"
    return True, ""


def has_gpu() -> bool:
    return _probe()[0]


def require_gpu() -> None:
    ok, why = _probe()
    if not ok:
        raise NoGPU(f"no CUDA GPU here: {why}. Kernels cannot run on this machine; "
                    "the stored outputs of this notebook show a run on an H200.")


@functools.lru_cache(maxsize=None)
def device_summary() -> dict:
    """Name, compute capability, SM count, L2, shared memory, clocks of device 0."""
    require_gpu()
    import cupy
    p = cupy.cuda.runtime.getDeviceProperties(0)
    dev = cupy.cuda.Device(0)
    name = p["name"].decode() if isinstance(p["name"], bytes) else p["name"]
    return {
        "name": name,
        "cc": f"{p['major']}.{p['minor']}",
        "major": p["major"], "minor": p["minor"],
        "sms": p["multiProcessorCount"],
        "l2_bytes": p["l2CacheSize"],
        "smem_per_block_optin": p["sharedMemPerBlockOptin"],
        "smem_per_sm": p["sharedMemPerMultiprocessor"],
        "regs_per_sm": p["regsPerMultiprocessor"],
        "max_threads_per_sm": p["maxThreadsPerMultiProcessor"],
        "memory_bytes": p["totalGlobalMem"],
        "mem_bus_bits": p.get("memoryBusWidth"),
        "clock_khz": p.get("clockRate"),
        "mem_clock_khz": p.get("memoryClockRate"),
        "device_id": dev.id,
    }


def slugify(name: str) -> str:
    """'NVIDIA H200' -> 'nvidia-h200'; 'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3'."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def gpu_slug() -> str:
    return slugify(device_summary()["name"])


# Features a cell may need, by the lowest compute capability that has them.
FEATURES = {
    "cp.async": (8, 0),
    "bf16-mma": (8, 0),
    "clusters": (9, 0),
    "tma": (9, 0),
    "wgmma": (9, 0),   # needs the sm_90a target: exactly 9.0, not later archs
    "setmaxnreg": (9, 0),
}


def supports(feature: str) -> bool:
    if feature not in FEATURES:
        raise ValueError(f"unknown feature {feature!r}; expected one of {sorted(FEATURES)}")
    if not has_gpu():
        return False
    d = device_summary()
    cc = (d["major"], d["minor"])
    if feature in ("wgmma", "setmaxnreg"):
        return cc == (9, 0)  # arch-specific 'a' features exist on sm_90a only
    return cc >= FEATURES[feature]


def require(feature: str) -> None:
    require_gpu()
    if not supports(feature):
        d = device_summary()
        raise MissingFeature(f"this cell needs {feature}, which {d['name']} (sm_{d['major']}{d['minor']}) lacks")
