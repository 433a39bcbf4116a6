"""Is there a GPU, what is it, and what can it do.

Errors raised here render as one line in Jupyter (``_render_traceback_``), so a reader on a machine
without the hardware sees a sentence instead of a traceback wall.

``BOOK_ARCH=sm_80`` (read once per process; also sm_86, sm_89, sm_90, sm_90a) emulates a reader whose
GPU is that arch: :func:`supports` answers for the device *and* the emulated arch, so on an H200 the
Hopper features (clusters, tma, wgmma, setmaxnreg) are reported absent, and ``utils.build`` builds
for the emulated arch (as PTX, which the driver JIT-compiles for the real GPU).
"""
from __future__ import annotations

import functools
import os
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
        "emulated_arch": emulated_arch(),
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
    "wgmma": (9, 0),
    "setmaxnreg": (9, 0),
}
# Features that exist only on the arch-specific sm_90a target: exactly compute capability 9.0, and code
# using them must be built for sm_90a (clusters and TMA are plain sm_90 and carry over to later archs).
ARCH_SPECIFIC = frozenset({"wgmma", "setmaxnreg"})

ARCH_ENV = "BOOK_ARCH"
EMULABLE_ARCHS = ("sm_80", "sm_86", "sm_89", "sm_90", "sm_90a")
_ARCH_RE = re.compile(r"sm_(\d+)(\d)[af]?")   # sm_80, sm_90a, sm_100a


def arch_cc(arch: str) -> tuple[int, int]:
    """'sm_90a' -> (9, 0)."""
    m = _ARCH_RE.fullmatch(arch)
    if not m:
        raise ValueError(f"expected an arch like 'sm_80' or 'sm_90a', got {arch!r}")
    return int(m.group(1)), int(m.group(2))


def arch_has(arch: str, feature: str) -> bool:
    """Whether a GPU of ``arch`` has ``feature`` (a capability question, not a build target's)."""
    check_feature(feature)
    cc = arch_cc(arch)
    if feature in ARCH_SPECIFIC:
        return cc == (9, 0)
    return cc >= FEATURES[feature]


def check_feature(feature: str) -> None:
    if feature not in FEATURES:
        raise ValueError(f"unknown feature {feature!r}; expected one of {sorted(FEATURES)}")


@functools.lru_cache(maxsize=None)
def emulated_arch() -> str | None:
    """The arch ``BOOK_ARCH`` asks to emulate, or None. Read once: a process builds for one arch."""
    value = os.environ.get(ARCH_ENV, "").strip()
    if not value:
        return None
    if value not in EMULABLE_ARCHS:
        raise ValueError(f"{ARCH_ENV}={value!r} is not an arch this book emulates; "
                         f"expected one of {', '.join(EMULABLE_ARCHS)} (or unset)")
    return value


def device_arch() -> str:
    """'sm_XY' of device 0 (needs a GPU)."""
    d = device_summary()
    return f"sm_{d['major']}{d['minor']}"


def supports(feature: str) -> bool:
    """Whether this machine's GPU has ``feature`` (and, under ``BOOK_ARCH``, the emulated arch too)."""
    check_feature(feature)
    if not has_gpu():
        return False
    emulated = emulated_arch()
    return arch_has(device_arch(), feature) and (emulated is None or arch_has(emulated, feature))


def missing_features(features) -> list[str]:
    """Those of ``features`` this machine lacks, in the order given."""
    return [f for f in features if not supports(f)]


def machine_label() -> str:
    """'NVIDIA A100 (sm_80)', 'NVIDIA H200 emulating sm_80 (BOOK_ARCH=sm_80)', 'this machine (no GPU)'."""
    if not has_gpu():
        return "this machine (no GPU)"
    name, emulated = device_summary()["name"], emulated_arch()
    if emulated:
        return f"{name} emulating {emulated} ({ARCH_ENV}={emulated})"
    return f"{name} ({device_arch()})"


def lacks_sentence(missing, needed_by: str = "this cell") -> str:
    """'this cell needs clusters, which NVIDIA H200 emulating sm_80 (BOOK_ARCH=sm_80) lacks'."""
    return f"{needed_by} needs {', '.join(missing)}, which {machine_label()} lacks"


def require(*features: str, needed_by: str = "this cell") -> None:
    """Raise :class:`MissingFeature` (one line in Jupyter) unless the GPU has every feature."""
    require_gpu()
    missing = missing_features(features)
    if missing:
        raise MissingFeature(lacks_sentence(missing, needed_by))
