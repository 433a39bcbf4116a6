"""Compile kernels/ sources with NVRTC and load them into CuPy.

One path for every machine: ``cuda.core.Program`` (NVRTC) compiles a ``.cu`` file to a cubin, with the
ptxas report captured; on a GPU the cubin is loaded as a CuPy ``RawModule``. The CPU-only CI check
compiles through the same function with the same options, so "it compiles in CI" means "it compiles
on the H200". Results are cached per (source text, included headers, options, arch): editing a kernel
file and re-running a cell recompiles it.

Arch: Hopper-only code (wgmma, setmaxnreg) builds for ``sm_90a``; everything else for the running
GPU's own arch (``sm_90`` when asked without a GPU, the arch the book is executed on).
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
import os
import re
import tempfile
from pathlib import Path

from .paths import INCLUDE, KERNELS, REPO

DEFAULT_ARCH = "sm_90"  # arch assumed when no GPU is present (CI compile checks)
HOPPER_ARCH = "sm_90a"


_INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


class CompileError(RuntimeError):
    """NVRTC rejected a kernel file; the message carries the compiler log."""


@dataclasses.dataclass(frozen=True)
class KernelSource:
    """A kernels/ file and how to build it.

    ``file`` is relative to kernels/. ``hopper`` builds for sm_90a. ``name_expressions`` instantiates
    templates (``"gemm<128, 128>"``). ``spill_free`` kernels fail the CI compile check if ptxas reports
    any spill bytes. ``defines`` become ``-D`` options.
    """

    file: str
    hopper: bool = False
    name_expressions: tuple[str, ...] = ()
    spill_free: bool = True
    defines: tuple[tuple[str, str], ...] = ()

    @property
    def path(self) -> Path:
        return KERNELS / self.file

    def arch(self, device_arch: str | None = None) -> str:
        if self.hopper:
            return HOPPER_ARCH
        return device_arch or running_arch()

    def program_options(self, arch: str, ptxas_verbose: bool = True):
        """NVRTC options, the same on every machine. ftz as CuPy's own NVRTC path sets it."""
        from cuda.core import ProgramOptions
        return ProgramOptions(
            name=self.file, arch=arch, std="c++17", ftz=True, lineinfo=True,
            include_path=[str(INCLUDE), str(self.path.parent), *cuda_include_dirs()],
            define_macro=[(k, v) for k, v in self.defines] or None,
            ptxas_options=["-v"] if ptxas_verbose else None,
        )

    def function(self, name: str):
        """The CuPy kernel ``name`` (a plain extern "C" name or one of ``name_expressions``).

        Cheap enough to call on every launch: while the files behind the module keep their size and
        modification time, the loaded kernel is returned without re-reading or re-hashing anything.
        """
        hit = _functions.get((self, name))
        if hit is not None and hit[0] == _stat_signature(hit[1]):
            return hit[2]
        comp = compile_source(self)
        fn = load(self).get_function(name)
        _functions[(self, name)] = (_stat_signature(comp.inputs), comp.inputs, fn)
        return fn

    def launchable(self, name: str, cluster: int = 1, dynamic_smem: int = 0):
        """:meth:`function`, with the function attributes a launch of ``cluster`` blocks per cluster and
        ``dynamic_smem`` bytes of dynamic shared memory needs (see :func:`prepare_launch`)."""
        return prepare_launch(self.function(name), cluster, dynamic_smem)

    def ptxas(self) -> dict[str, dict]:
        """Per-kernel ptxas report: registers, shared memory, stack, spills."""
        return compile_source(self).report


@dataclasses.dataclass
class Compiled:
    cubin: bytes
    symbols: dict[str, str]      # name expression -> mangled name
    log: str                     # the full ptxas/NVRTC log
    report: dict[str, dict]      # kernel (mangled) name -> resources
    arch: str
    inputs: tuple[Path, ...]     # the .cu file and every header it pulled from kernels/include


def running_arch() -> str:
    """'sm_XY' of the GPU present, else the book's target arch (sm_90)."""
    from .gpu import device_summary, has_gpu
    if not has_gpu():
        return DEFAULT_ARCH
    d = device_summary()
    return f"sm_{d['major']}{d['minor']}"


def local_includes(path: Path) -> tuple[Path, ...]:
    """The file and every quoted header it includes from kernels/include, recursively, in order."""
    seen: list[Path] = []

    def visit(p: Path):
        if p in seen:
            return
        seen.append(p)
        for name in _INCLUDE_RE.findall(p.read_text()):
            for base in (p.parent, INCLUDE):
                cand = (base / name).resolve()
                if cand.exists():
                    visit(cand)
                    break
            else:
                raise CompileError(f'{p.name}: #include "{name}" not found in {p.parent} or {INCLUDE}')

    visit(path.resolve())
    return tuple(seen)


@functools.lru_cache(maxsize=None)
def cuda_include_dirs() -> tuple[str, ...]:
    """Where the CUDA headers live: the runtime's (cuda_bf16.h, cooperative_groups.h) and CCCL's
    (<nv/target>, which cooperative_groups.h includes), from the pip wheels or the toolkit."""
    def locate(lib: str, probe: str, fallbacks: tuple[str, ...]) -> str | None:
        cands = []
        try:
            from cuda.pathfinder import find_nvidia_header_directory
            cands.append(find_nvidia_header_directory(lib))
        except Exception:
            pass
        for env in ("CUDA_PATH", "CUDA_HOME"):
            if os.environ.get(env):
                cands += [os.path.join(os.environ[env], "include", sub) for sub in fallbacks]
        cands += [os.path.join("/usr/local/cuda/include", sub) for sub in fallbacks]
        return next((str(d) for d in cands if d and os.path.exists(os.path.join(str(d), probe))), None)

    found = [locate("cudart", "cuda_runtime.h", ("",)), locate("cccl", os.path.join("nv", "target"), ("cccl", ""))]
    return tuple(dict.fromkeys(d for d in found if d))


def _fingerprint(src: KernelSource, arch: str, inputs: tuple[Path, ...]) -> str:
    h = hashlib.sha256()
    for p in inputs:
        h.update(str(p.relative_to(REPO)).encode())
        h.update(p.read_bytes())
    h.update(repr((arch, src.defines, src.name_expressions)).encode())
    return h.hexdigest()


_compiled: dict[str, Compiled] = {}
_functions: dict[tuple, tuple] = {}   # (source, name) -> (stat signature, inputs, kernel)


def _stat_signature(paths) -> tuple:
    out = []
    for p in paths:
        try:
            st = os.stat(p)
            out.append((st.st_mtime_ns, st.st_size))
        except FileNotFoundError:
            out.append(None)
    return tuple(out)


def compile_source(src: KernelSource, arch: str | None = None) -> Compiled:
    """Compile with NVRTC to a cubin (no GPU needed). Cached while the sources are unchanged."""
    if not src.path.exists():
        raise CompileError(f"kernel file {src.path} does not exist")
    arch = src.arch(arch)
    inputs = local_includes(src.path)
    key = _fingerprint(src, arch, inputs)
    if key in _compiled:
        return _compiled[key]
    obj, text = _nvrtc(src, arch)
    if not set(cubin_kernels(obj.code)) <= set(parse_ptxas(text)):
        # A build served from a compile cache comes back without the ptxas log, or with the log of only
        # some of its kernels (both seen on the H200 host when a source had been compiled before: an
        # nbval pass lost the report of w4a16_gemv_v0_naive). A define no cache has seen forces a real
        # build, whose log covers every kernel in the cubin.
        _, text = _nvrtc(src, arch, nonce=os.urandom(8).hex())
    symbols = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in (obj.symbol_mapping or {}).items()}
    out = Compiled(obj.code, symbols, text, parse_ptxas(text), arch, inputs)
    _compiled[key] = out
    _note_inputs(src, inputs)
    return out


def cubin_kernels(cubin: bytes) -> list[str]:
    """The (mangled) names of the kernels in a cubin: each entry function has a ``.nv.info.<name>`` section,
    device functions do not."""
    return sorted({m.decode() for m in re.findall(rb"\.nv\.info\.([^\x00]+)\x00", cubin)})


def _nvrtc(src: KernelSource, arch: str, nonce: str | None = None):
    """One NVRTC compile to a cubin: (ObjectCode, log text)."""
    from cuda.core import Program
    opts = src.program_options(arch)
    if nonce:
        opts.define_macro = [*(opts.define_macro or []), ("BOOK_BUILD_NONCE", nonce)]
    log = io.StringIO()
    try:
        obj = Program(src.path.read_text(), "c++", opts).compile(
            "cubin", name_expressions=src.name_expressions or (), logs=log)
    except Exception as e:  # NVRTCError carries the log in its message
        raise CompileError(f"{src.file} ({arch}) failed to compile:\n{e}\n{log.getvalue()}") from None
    return obj, log.getvalue()


_PTXAS_FUNC = re.compile(r"Compiling entry function '([^']+)' for '(\w+)'")
_PTXAS_PROPS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_USED = re.compile(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")


def parse_ptxas(log: str) -> dict[str, dict]:
    """Turn ``ptxas -v`` output into {kernel: {registers, smem_bytes, stack_bytes, spill_stores, spill_loads}}."""
    report: dict[str, dict] = {}
    current = None
    for line in log.splitlines():
        m = _PTXAS_FUNC.search(line)
        if m:
            current = m.group(1)
            report[current] = {"registers": 0, "smem_bytes": 0, "stack_bytes": 0,
                               "spill_stores": 0, "spill_loads": 0}
            continue
        if current is None:
            continue
        m = _PTXAS_PROPS.search(line)
        if m:
            report[current].update(stack_bytes=int(m.group(1)), spill_stores=int(m.group(2)),
                                   spill_loads=int(m.group(3)))
            continue
        m = _PTXAS_USED.search(line)
        if m:
            report[current]["registers"] = int(m.group(1))
            if m.group(2):
                report[current]["smem_bytes"] = int(m.group(2))
    return report


_modules: dict[int, object] = {}


def load(src: KernelSource):
    """The CuPy RawModule for ``src`` on the current device; recompiled when the file changed."""
    from .gpu import require, require_gpu
    require_gpu()
    if src.hopper:
        require("wgmma")
    import cupy

    comp = compile_source(src)
    cache_key = id(comp)
    mod = _modules.get(cache_key)
    if mod is None:
        cache_dir = Path(tempfile.gettempdir()) / "fa2-book-cubins"
        cache_dir.mkdir(exist_ok=True)
        path = cache_dir / (hashlib.sha256(comp.cubin).hexdigest()[:24] + ".cubin")
        if not path.exists():
            path.write_bytes(comp.cubin)
        mod = _NamedModule(cupy.RawModule(path=str(path)), comp.symbols)
        _modules[cache_key] = mod
    return mod


class _NamedModule:
    """RawModule that also resolves template name expressions to their mangled names."""

    def __init__(self, raw, symbols: dict[str, str]):
        self.raw, self.symbols = raw, symbols

    def get_function(self, name: str):
        return self.raw.get_function(self.symbols.get(name, name))


def ptx(src: KernelSource) -> str:
    """The PTX NVRTC emits for ``src``. Calls NVRTC directly: cuda.core asks the driver for its
    version when it emits PTX, and a machine without a GPU has no driver."""
    from cuda.bindings import nvrtc

    def ok(ret):
        err, *rest = ret if isinstance(ret, tuple) else (ret,)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(f"{src.file}: NVRTC error {err}")
        return rest[0] if len(rest) == 1 else rest

    opts = src.program_options(src.arch(), ptxas_verbose=False).as_bytes("nvrtc")
    prog = ok(nvrtc.nvrtcCreateProgram(src.path.read_bytes(), src.file.encode(), 0, [], []))
    try:
        for expr in src.name_expressions:
            ok(nvrtc.nvrtcAddNameExpression(prog, expr.encode()))
        err, = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            size = ok(nvrtc.nvrtcGetProgramLogSize(prog))
            log = b" " * size
            ok(nvrtc.nvrtcGetProgramLog(prog, log))
            raise CompileError(f"{src.file} failed to compile:\n{log.decode(errors='replace')}")
        size = ok(nvrtc.nvrtcGetPTXSize(prog))
        buf = b" " * size
        ok(nvrtc.nvrtcGetPTX(prog, buf))
        return buf.rstrip(b"\x00").decode()
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def sass(src: KernelSource, kernel: str | None = None) -> str:
    """SASS of the compiled cubin through cuobjdump (present on GPU hosts with the CUDA toolkit)."""
    import shutil
    import subprocess
    tool = shutil.which("cuobjdump")
    if tool is None:
        try:
            from cuda.pathfinder import find_nvidia_binary_utility
            tool = find_nvidia_binary_utility("cuobjdump")
        except Exception:
            tool = None
    if tool is None:
        raise FileNotFoundError("cuobjdump not found: install the CUDA toolkit to read SASS")
    comp = compile_source(src)
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(comp.cubin)
        f.flush()
        args = [tool, "-sass"]
        if kernel:
            args += ["-fun", comp.symbols.get(kernel, kernel)]
        return subprocess.run(args + [f.name], capture_output=True, text=True, check=True).stdout


# --- inputs log: which repository files a notebook compiled (for its freshness stamp) -------------

INPUTS_ENV = "BOOK_INPUTS_LOG"


def _note_inputs(src: KernelSource, inputs: tuple[Path, ...]) -> None:
    """Append the files behind a compiled kernel to the log the notebook runner reads, if one is set."""
    log = os.environ.get(INPUTS_ENV)
    if not log:
        return
    host_side = src.path.with_suffix(".py")
    files = [*inputs, *([host_side] if host_side.exists() else [])]
    with open(log, "a") as f:
        for p in files:
            f.write(str(p.resolve().relative_to(REPO)) + "\n")


# --- launch attributes: clusters above the portable size, dynamic shared memory above 48 KB ---------

PORTABLE_CLUSTER = 8                       # blocks per cluster every sm_90 launch may use
_NON_PORTABLE_CLUSTER_ATTR = 14            # CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
_prepared: dict[int, tuple] = {}           # id(function) -> (function, cluster allowed, smem allowed)


def prepare_launch(fn, cluster: int = 1, dynamic_smem: int = 0):
    """Set, once per loaded function, what CuPy's plain cuLaunchKernel needs for this launch: a cluster
    larger than the portable 8 (a kernel compiled with ``__cluster_dims__(16, 1, 1)``) only launches
    once the function allows non-portable cluster sizes; more than 48 KB of dynamic shared memory only
    once the function's maximum is raised. Returns ``fn``. Op-agnostic: every op family with cluster
    or large-smem kernels launches through here."""
    fn_prev, cl_ok, smem_ok = _prepared.get(id(fn), (fn, PORTABLE_CLUSTER, 48 * 1024))
    if fn_prev is not fn:                  # a new function object reused an id: start over
        cl_ok, smem_ok = PORTABLE_CLUSTER, 48 * 1024
    if cluster > cl_ok:
        import cupy
        cupy.cuda.driver.funcSetAttribute(fn.kernel.ptr, _NON_PORTABLE_CLUSTER_ATTR, 1)
        cl_ok = cluster
    if dynamic_smem > smem_ok:
        if fn.max_dynamic_shared_size_bytes < dynamic_smem:
            fn.max_dynamic_shared_size_bytes = int(dynamic_smem)
        smem_ok = dynamic_smem
    _prepared[id(fn)] = (fn, cl_ok, smem_ok)
    return fn


def max_active_clusters(fn, block: int, dynamic_smem: int = 0, cluster: int = 1) -> int | None:
    """How many clusters of a kernel compiled with ``__cluster_dims__`` fit on the device at once
    (``cuOccupancyMaxActiveClusters``: blocks per SM from registers and shared memory, and how
    clusters pack into GPCs), for sizing a persistent grid; None where the driver cannot say (then the
    caller falls back on its own estimate). Call after :func:`prepare_launch`."""
    try:
        from cuda.bindings import driver as cu
        cfg = cu.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = int(cluster), 1, 1
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = int(block), 1, 1
        cfg.sharedMemBytes = int(dynamic_smem)
        cfg.numAttrs = 0
        err, n = cu.cuOccupancyMaxActiveClusters(cu.CUfunction(fn.kernel.ptr), cfg)
        if err != cu.CUresult.CUDA_SUCCESS or int(n) < 1:
            return None
        return int(n)
    except Exception:  # noqa: BLE001 - no driver, an old binding, a refused config: the caller estimates
        return None
