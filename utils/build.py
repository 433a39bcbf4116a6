"""Compile kernels/ sources (NVRTC, or nvcc for what NVRTC cannot build) and load them into CuPy.

One path for every machine: NVRTC (through ``cuda.bindings``) compiles a ``.cu`` file to a cubin and
its PTX, with the ptxas report captured; on a GPU the result is loaded as a CuPy ``RawModule``. The
CPU-only CI check compiles through the same function with the same options, so "it compiles in CI"
means "it compiles on the H200".

Caching. A build is keyed by the text of the ``.cu`` and of every local header it includes, the
options, the arch, the compiler's version and the extra include dirs (each by path and the version
of the wheel that provides it). Builds live in memory and on disk (``BOOK_CACHE_DIR``, else
``$XDG_CACHE_HOME/fa2-book/kernels`` or ``~/.cache/fa2-book/kernels``), so a second process compiles
nothing it has compiled before; editing a kernel file and re-running a cell recompiles it.

Arch. A source declares the features it needs (``requires=("wgmma",)``, names from
``utils.gpu.FEATURES``). It builds for ``sm_90a`` if one of them exists only there (wgmma,
setmaxnreg), else for the running GPU's own arch (``sm_90`` without a GPU; the emulated arch under
``BOOK_ARCH``), or for the lowest arch that has the features when the running one lacks them (so the
ptxas report still exists). Under ``BOOK_ARCH`` a build for the emulated arch is loaded as PTX, which
the driver JIT-compiles for the real GPU (an sm_80 cubin cannot load on an sm_90 GPU).

``BOOK_COMPILE_LOG=<file>`` appends ``<kind>\\t<seconds>\\t<file>\\t<arch>`` per build that was not
already in memory (kind: nvrtc, nvcc or disk); :func:`compile_stats` sums the same for this process.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
import zlib
from pathlib import Path

from .paths import INCLUDE, KERNELS, REPO

DEFAULT_ARCH = "sm_90"  # arch assumed when no GPU is present (CI compile checks)
HOPPER_ARCH = "sm_90a"
COMPILERS = ("nvrtc", "nvcc")
CACHE_ENV = "BOOK_CACHE_DIR"
COMPILE_LOG_ENV = "BOOK_COMPILE_LOG"
CACHE_FORMAT = 1          # bump when an entry's layout or the meaning of the key changes
# nvcc's flags for CUTLASS/CuTe translation units: without -DNDEBUG ptxas serializes wgmma at
# function calls (C7510) and a CUTLASS sm90 GEMM loses about 6%.
NVCC_FLAGS = ("-cubin", "-std=c++17", "-O3", "--expt-relaxed-constexpr", "-DNDEBUG", "-lineinfo",
              "-Xptxas", "-v")
NVCC_WHEELS = "nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88"
CUTLASS_WHEEL = "nvidia-cutlass==4.2.0.0"

_INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


class CompileError(RuntimeError):
    """The compiler rejected a kernel file; the message carries the compiler log."""


class ToolchainMissing(CompileError):
    """A compiler (nvcc, a host C++ compiler) or a header package the build needs is not installed."""


@dataclasses.dataclass(frozen=True)
class KernelSource:
    """A kernels/ file and how to build it.

    ``file`` is relative to kernels/. ``requires`` names the ``utils.gpu.FEATURES`` the code needs
    (sets the arch and makes :func:`load` refuse a GPU without them). ``name_expressions``
    instantiates templates (``"gemm<128, 128>"``; NVRTC only). ``spill_free`` kernels fail the CI
    compile check if ptxas reports any spill bytes. ``defines`` become ``-D`` options.
    ``include_dirs`` adds ``-I`` paths (``cutlass_include_dirs()``). ``compiler="nvcc"`` builds
    with nvcc (kernels must then be ``extern "C"``).
    """

    file: str
    requires: tuple[str, ...] = ()
    name_expressions: tuple[str, ...] = ()
    spill_free: bool = True
    defines: tuple[tuple[str, str], ...] = ()
    include_dirs: tuple[str, ...] = ()
    compiler: str = "nvrtc"

    def __post_init__(self):
        from .gpu import check_feature
        for name in ("requires", "name_expressions", "include_dirs"):
            if isinstance(getattr(self, name), str):
                raise ValueError(f"{self.file}: {name} expects a tuple of strings, got the string "
                                 f"{getattr(self, name)!r}")
        for feature in self.requires:
            check_feature(feature)
        if self.compiler not in COMPILERS:
            raise ValueError(f"{self.file}: compiler expects one of {COMPILERS}, got {self.compiler!r}")
        if self.compiler == "nvcc" and self.name_expressions:
            raise ValueError(f"{self.file}: nvcc builds take no name_expressions (nvcc cannot report "
                             "mangled names); give the kernels extern \"C\" names")
        # tuples keep the dataclass hashable; paths may come as Path objects
        object.__setattr__(self, "requires", tuple(self.requires))
        object.__setattr__(self, "include_dirs", tuple(str(d) for d in self.include_dirs))

    @property
    def path(self) -> Path:
        return KERNELS / self.file

    def arch(self, device_arch: str | None = None) -> str:
        """The arch this source builds for when the running GPU is ``device_arch``."""
        return target_arch(self.requires, device_arch or running_arch())

    def options(self, arch: str, nonce: str | None = None) -> list[str]:
        """The compiler's command-line options (no input or output file)."""
        if self.compiler == "nvcc":
            return nvcc_options(self, arch, nonce)
        return nvrtc_options(self, arch, nonce)

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
    log: str                     # the full compiler/ptxas log
    report: dict[str, dict]      # kernel (mangled) name -> resources
    arch: str
    inputs: tuple[Path, ...]     # the .cu file and every header it pulled from kernels/
    packed_ptx: bytes = b""      # zlib-compressed PTX the cubin was assembled from (`.target` = arch)
    compiler: str = "nvrtc"

    @property
    def ptx(self) -> str:
        """The PTX, inflated on use: only an emulated run loads it, and a warm process should not pay
        for inflating megabytes of it per source."""
        return zlib.decompress(self.packed_ptx).decode() if self.packed_ptx else ""


# --- arch -----------------------------------------------------------------------------------------

def running_arch() -> str:
    """``BOOK_ARCH`` if set, else 'sm_XY' of the GPU present, else the book's target arch (sm_90)."""
    from .gpu import arch_cc, device_arch, emulated_arch, has_gpu
    emulated = emulated_arch()
    if emulated:
        if has_gpu() and arch_cc(emulated) > arch_cc(device_arch()):
            raise ValueError(f"BOOK_ARCH={emulated} emulates a newer GPU than this {device_arch()}; "
                             "expected an arch at most the device's")
        return emulated
    if not has_gpu():
        return DEFAULT_ARCH
    return device_arch()


def target_arch(requires, running: str) -> str:
    """sm_90a if a required feature exists only there; else ``running`` if it has every feature; else
    the lowest arch that has them (the build must exist even where :func:`load` will refuse it)."""
    from .gpu import ARCH_SPECIFIC, arch_has
    if ARCH_SPECIFIC.intersection(requires):
        return HOPPER_ARCH
    for arch in (running, "sm_80", DEFAULT_ARCH):
        if all(arch_has(arch, f) for f in requires):
            return arch
    raise ValueError(f"no arch this book builds for has all of {tuple(requires)}")


# --- inputs and include dirs ------------------------------------------------------------------------

def local_includes(path: Path, include_dirs=()) -> tuple[Path, ...]:
    """The file and every quoted header it includes from its own dir, kernels/include or an include
    dir inside the repository, recursively, in order. Headers found in an include dir outside the
    repository (a wheel's) are not followed: the cache key identifies them by the providing package's
    version instead (:func:`include_dir_identity`)."""
    repo_dirs = [Path(d) for d in include_dirs if in_repo(d)]
    seen: list[Path] = []

    def visit(p: Path):
        if p in seen:
            return
        seen.append(p)
        for name in _INCLUDE_RE.findall(p.read_text()):
            for base in (p.parent, INCLUDE, *repo_dirs):
                cand = (base / name).resolve()
                if cand.exists():
                    visit(cand)
                    break
            else:
                if not any((Path(d) / name).exists() for d in include_dirs):
                    raise CompileError(f'{p.name}: #include "{name}" not found in {p.parent}, {INCLUDE}'
                                       + "".join(f", {d}" for d in include_dirs))

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


@functools.lru_cache(maxsize=None)
def cutlass_include_dirs() -> tuple[str, str]:
    """The CUTLASS and CuTe headers of the ``nvidia-cutlass`` wheel: ``cutlass_library/source/include``
    (cute/, cutlass/) and ``.../tools/util/include`` (cutlass/util/). For ``include_dirs=``."""
    import importlib.util
    spec = importlib.util.find_spec("cutlass_library")   # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise ToolchainMissing(f"the CUTLASS/CuTe headers come from the nvidia-cutlass wheel, which is "
                               f"not installed: pip install {CUTLASS_WHEEL}")
    source = Path(next(iter(spec.submodule_search_locations))) / "source"
    dirs = (source / "include", source / "tools" / "util" / "include")
    if not (dirs[0] / "cute" / "tensor.hpp").exists() or not dirs[1].is_dir():
        raise ToolchainMissing(f"nvidia-cutlass at {source.parent} lacks source/include/cute/tensor.hpp "
                               f"or source/tools/util/include; reinstall {CUTLASS_WHEEL}")
    return str(dirs[0]), str(dirs[1])


def include_dir_identity(d: str) -> str:
    """What identifies the headers under ``d`` for the cache key: the path plus the name and version
    of every wheel installing into its top-level package dir (hashing thousands of CUTLASS headers on
    every build would cost more than it saves); a repository dir by its path (its headers are hashed
    one by one); any other dir (a CUDA toolkit) by its path and modification time."""
    providers = wheel_providers(d)
    if providers:
        return f"{d}|{','.join(providers)}"
    if in_repo(d):
        return _shown_path(Path(d).resolve())
    return f"{d}|mtime={os.stat(d).st_mtime_ns}"


def wheel_providers(d: str) -> list[str]:
    """['nvidia_cutlass-4.2.0.0'] for a dir inside an installed wheel's package, else []."""
    real = Path(d).resolve()
    for entry in sys.path:
        site = Path(entry or ".").resolve()
        if site != real and site in real.parents:
            providers = site_providers(str(site)).get(real.relative_to(site).parts[0])
            if providers:
                return providers
    return []


@functools.lru_cache(maxsize=None)
def site_providers(site: str) -> dict[str, list[str]]:
    """{top-level dir: ['nvidia_cuda_runtime-13.0.96', ...]} from the *.dist-info dirs of ``site``."""
    out: dict[str, list[str]] = {}
    for info in sorted(Path(site).glob("*.dist-info")):
        try:
            tops = (info / "top_level.txt").read_text().split()
        except OSError:
            continue
        for top in tops:
            out.setdefault(top, []).append(info.name[: -len(".dist-info")])
    return out


def in_repo(d) -> bool:
    """Inside the repository and not an installed wheel's (a virtual environment may live in it)."""
    return Path(d).resolve().is_relative_to(REPO) and not wheel_providers(d)


def header_dirs(src: KernelSource) -> tuple[str, ...]:
    """-I dirs after kernels/include and the file's own dir: the source's, then (NVRTC) CUDA's."""
    cuda = cuda_include_dirs() if src.compiler == "nvrtc" else ()
    return (*src.include_dirs, *cuda)


# --- compilers ----------------------------------------------------------------------------------------

@dataclasses.dataclass
class Build:
    """What one compiler run produced."""
    cubin: bytes
    packed_ptx: bytes            # zlib-compressed
    log: str
    symbols: dict[str, str]

    @property
    def ptx(self) -> str:
        return zlib.decompress(self.packed_ptx).decode()


def pack_ptx(text: str) -> bytes:
    return zlib.compress(text.encode(), 1)


def nvrtc_options(src: KernelSource, arch: str, nonce: str | None = None) -> list[str]:
    """NVRTC options, the same on every machine; ftz as CuPy's own NVRTC path sets it. A ``compute_``
    arch yields PTX only (no ptxas run)."""
    defines = [*src.defines, *([("BOOK_BUILD_NONCE", nonce)] if nonce else [])]
    return [f"-arch={arch}", "--generate-line-info",
            *(["--ptxas-options=-v"] if arch.startswith("sm_") else []), "--ftz=true",
            *(f"--define-macro={k}={v}" for k, v in defines),
            *(f"--include-path={d}" for d in (INCLUDE, src.path.parent, *header_dirs(src))),
            "--std=c++17"]


def nvcc_options(src: KernelSource, arch: str, nonce: str | None = None) -> list[str]:
    defines = [*src.defines, *([("BOOK_BUILD_NONCE", nonce)] if nonce else [])]
    return [*NVCC_FLAGS, f"-arch={arch}",
            *(f"-I{d}" for d in (INCLUDE, src.path.parent, *header_dirs(src))),
            *(f"-D{k}={v}" for k, v in defines)]


@functools.lru_cache(maxsize=None)
def nvrtc_version() -> str:
    from cuda.bindings import nvrtc
    _, major, minor = nvrtc.nvrtcVersion()
    return f"{major}.{minor}"


def nvrtc_compile(src: KernelSource, arch: str, nonce: str | None = None) -> Build:
    """One NVRTC compile: PTX, and for an ``sm_`` arch the cubin and ptxas log. Calls NVRTC directly:
    ``cuda.core`` asks the driver for its version when it emits PTX (a CPU machine has no driver), and
    importing it takes longer than a whole warm build."""
    from cuda.bindings import nvrtc

    def ok(ret):
        err, *rest = ret if isinstance(ret, tuple) else (ret,)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(f"{src.file} ({arch}): NVRTC error {err}")
        return rest[0] if len(rest) == 1 else rest

    def read(size_fn, get_fn) -> bytes:
        buf = b" " * ok(size_fn(prog))
        ok(get_fn(prog, buf))
        return buf

    opts = [o.encode() for o in nvrtc_options(src, arch, nonce)]
    prog = ok(nvrtc.nvrtcCreateProgram(src.path.read_bytes(), src.file.encode(), 0, [], []))
    try:
        for expr in src.name_expressions:
            ok(nvrtc.nvrtcAddNameExpression(prog, expr.encode()))
        err, = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        log = read(nvrtc.nvrtcGetProgramLogSize, nvrtc.nvrtcGetProgramLog)
        log = log.rstrip(b"\x00 ").decode(errors="replace")
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(f"{src.file} ({arch}) failed to compile:\n{log}")
        ptx_text = read(nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX).rstrip(b"\x00").decode()
        cubin = read(nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN) if arch.startswith("sm_") else b""
        symbols = {e: ok(nvrtc.nvrtcGetLoweredName(prog, e.encode())).decode() for e in src.name_expressions}
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    return Build(cubin, pack_ptx(ptx_text), log, symbols)


def nvcc_candidates() -> list[str]:
    """Where nvcc may be, in the order tried: PATH, $CUDA_HOME/bin, $CUDA_PATH/bin, /usr/local/cuda/bin,
    the nvidia-cuda-nvcc wheel."""
    cands = [shutil.which("nvcc")]
    cands += [os.path.join(os.environ[e], "bin", "nvcc") for e in ("CUDA_HOME", "CUDA_PATH")
              if os.environ.get(e)]
    cands.append("/usr/local/cuda/bin/nvcc")
    try:
        from cuda.pathfinder import find_nvidia_binary_utility
        cands.append(find_nvidia_binary_utility("nvcc"))
    except Exception:  # noqa: BLE001 - an old pathfinder or no wheel: nvcc is simply not there
        pass
    return [c for c in cands if c]


@functools.lru_cache(maxsize=None)
def find_nvcc() -> str:
    """The first executable of :func:`nvcc_candidates`, checked for a host C++ compiler too. Raises
    :class:`ToolchainMissing` saying what to install."""
    nvcc = next((c for c in nvcc_candidates() if os.access(c, os.X_OK)), None)
    if nvcc is None:
        raise ToolchainMissing("nvcc not found on PATH, in $CUDA_HOME/bin, $CUDA_PATH/bin, /usr/local/cuda/bin "
                               f"or a wheel: install the CUDA toolkit or pip install {NVCC_WHEELS}")
    if shutil.which("g++") is None:
        raise ToolchainMissing(f"nvcc ({nvcc}) needs a host C++ compiler and g++ is not on PATH "
                               "(apt-get install g++)")
    return nvcc


@functools.lru_cache(maxsize=None)
def nvcc_version() -> str:
    """'<path>: <release line>' of the nvcc :func:`find_nvcc` picks."""
    nvcc = find_nvcc()
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout
    return f"{os.path.realpath(nvcc)}: {out.strip().splitlines()[-1]}"


def nvcc_compile(src: KernelSource, arch: str, nonce: str | None = None) -> Build:
    """One nvcc compile to a cubin; ``-keep`` leaves the PTX it assembled beside it."""
    nvcc = find_nvcc()
    with tempfile.TemporaryDirectory(prefix="fa2-book-nvcc-") as tmp:
        out = Path(tmp) / "out.cubin"
        args = [nvcc, *nvcc_options(src, arch, nonce), "-keep", "-keep-dir", tmp, "-o", str(out),
                str(src.path)]
        proc = subprocess.run(args, capture_output=True, text=True, check=False)
        log = proc.stdout + proc.stderr
        if proc.returncode != 0:
            raise CompileError(f"{src.file} ({arch}) failed to compile with nvcc:\n{log}")
        ptx_text = "".join(p.read_text() for p in sorted(Path(tmp).glob("*.ptx")))
        return Build(out.read_bytes(), pack_ptx(ptx_text), log, {})


def compiler_identity(src: KernelSource) -> str:
    return f"nvcc {nvcc_version()}" if src.compiler == "nvcc" else f"nvrtc {nvrtc_version()}"


def _build(src: KernelSource, arch: str) -> Build:
    compile_once = nvcc_compile if src.compiler == "nvcc" else nvrtc_compile
    out = compile_once(src, arch)
    if not covers(out.cubin, out.log):
        # A build served from a compile cache comes back without the ptxas log, or with the log of only
        # some of its kernels (both seen on the H200 host when a source had been compiled before: an
        # nbval pass lost the report of w4a16_gemv_v0_naive). A define no cache has seen forces a real
        # build, whose log covers every kernel in the cubin.
        out = compile_once(src, arch, nonce=os.urandom(8).hex())
    return out


def covers(cubin: bytes, log: str) -> bool:
    """Whether the ptxas log reports every kernel of the cubin."""
    return set(cubin_kernels(cubin)) <= set(parse_ptxas(log))


# --- the cache: memory, then disk ---------------------------------------------------------------------

_compiled: dict[str, Compiled] = {}
_functions: dict[tuple, tuple] = {}   # (source, name) -> (stat signature, inputs, kernel)
_modules: dict[int, object] = {}      # id(Compiled) -> loaded module
_stats = {"nvrtc_s": 0.0, "nvcc_s": 0.0, "disk_s": 0.0, "builds": 0, "disk_hits": 0}


def cache_dir() -> Path:
    """Where builds are stored: ``BOOK_CACHE_DIR``, else ``$XDG_CACHE_HOME/fa2-book/kernels``, else
    ``~/.cache/fa2-book/kernels``. Deleting the directory clears the cache."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "fa2-book" / "kernels"


def cache_key(src: KernelSource, arch: str, inputs: tuple[Path, ...]) -> str:
    """sha256 over everything that decides the build: input texts, options, arch, compiler, headers."""
    h = hashlib.sha256()
    options = [o.replace(str(REPO), "<repo>") for o in src.options(arch)]
    headers = [include_dir_identity(d) for d in header_dirs(src)]
    what = (CACHE_FORMAT, compiler_identity(src), arch, options, headers, src.name_expressions)
    h.update(repr(what).encode())
    for p in inputs:
        h.update(_shown_path(p).encode() + b"\x00" + p.read_bytes() + b"\x00")
    return h.hexdigest()


def _shown_path(p: Path) -> str:
    """Repository-relative where possible, so clones in different places share builds."""
    try:
        return str(p.relative_to(REPO))
    except ValueError:
        return str(p)


def atomic_write(path: Path, data: bytes) -> None:
    """Write through a temporary file in the same directory and rename it into place, so a process
    reading ``path`` sees the old content or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o644)     # mkstemp makes 0600; others sharing the cache may read it
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


ENTRY_MAGIC = b"fa2-book build\n"


def _entry_path(key: str) -> Path:
    return cache_dir() / f"{key}.build"


def _entry_checksum(*parts: bytes) -> int:
    """crc32 over the parts: catches a truncated or damaged entry at GB/s (sha256 would cost a
    tenth of a second per warm chapter)."""
    crc = 0
    for part in parts:
        crc = zlib.crc32(part, crc)
    return crc


def store(key: str, src: KernelSource, out: Build, arch: str) -> None:
    """Write a build to the disk cache as one file: a magic line, a JSON line (sizes, symbols, checksum),
    the cubin, the compressed PTX, the log. A cache that cannot be written costs speed, not the build."""
    log = out.log.encode()
    meta = {"format": CACHE_FORMAT, "file": src.file, "arch": arch, "compiler": src.compiler,
            "symbols": out.symbols, "sizes": [len(out.cubin), len(out.packed_ptx), len(log)],
            "crc32": _entry_checksum(out.cubin, out.packed_ptx, log)}
    data = b"".join([ENTRY_MAGIC, json.dumps(meta).encode(), b"\n", out.cubin, out.packed_ptx, log])
    try:
        atomic_write(_entry_path(key), data)
    except OSError as e:
        warnings.warn(f"kernel build cache {cache_dir()} not writable ({e}); builds are kept in memory only",
                      stacklevel=3)


def stored(key: str) -> Build | None:
    """The disk cache's build for ``key``; None when absent, unreadable, corrupt or missing part of its
    ptxas report (then the caller rebuilds and overwrites it)."""
    try:
        data = _entry_path(key).read_bytes()
        if not data.startswith(ENTRY_MAGIC):
            return None
        head_end = data.index(b"\n", len(ENTRY_MAGIC))
        meta = json.loads(data[len(ENTRY_MAGIC):head_end])
        n_cubin, n_ptx, n_log = meta["sizes"]
        body = data[head_end + 1:]
        cubin, packed_ptx, log = body[:n_cubin], body[n_cubin:n_cubin + n_ptx], body[n_cubin + n_ptx:]
        if (meta["format"] != CACHE_FORMAT or len(log) != n_log
                or meta["crc32"] != _entry_checksum(cubin, packed_ptx, log)):
            return None
        out = Build(cubin, packed_ptx, log.decode(), dict(meta["symbols"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return out if covers(out.cubin, out.log) else None


def compile_source(src: KernelSource, arch: str | None = None) -> Compiled:
    """Compile to a cubin (no GPU needed), from memory or the disk cache when nothing changed."""
    if not src.path.exists():
        raise CompileError(f"kernel file {src.path} does not exist")
    for d in src.include_dirs:
        if not os.path.isdir(d):
            raise CompileError(f"{src.file}: include dir {d} does not exist")
    arch = src.arch(arch)
    start = time.perf_counter()
    inputs = local_includes(src.path, src.include_dirs)
    key = cache_key(src, arch, inputs)
    if key in _compiled:
        return _compiled[key]
    out, kind = stored(key), "disk"
    if out is None:
        out, kind = _build(src, arch), src.compiler
        store(key, src, out, arch)
    comp = Compiled(out.cubin, out.symbols, out.log, parse_ptxas(out.log), arch, inputs, out.packed_ptx,
                    src.compiler)
    _compiled[key] = comp
    _note_inputs(src, inputs)
    _note_compile(kind, time.perf_counter() - start, src, arch)
    return comp


def clear_memory_cache() -> None:
    """Forget the builds and modules held in memory (the disk cache stays): what a new process sees."""
    _compiled.clear()
    _functions.clear()
    _modules.clear()


def _note_compile(kind: str, seconds: float, src: KernelSource, arch: str) -> None:
    _stats[f"{kind}_s"] += seconds
    _stats["disk_hits" if kind == "disk" else "builds"] += 1
    log = os.environ.get(COMPILE_LOG_ENV)
    if log:
        with open(log, "a") as f:   # one short append per line: concurrent writers do not interleave
            f.write(f"{kind}\t{seconds:.3f}\t{src.file}\t{arch}\n")


def compile_stats() -> dict:
    """This process's compile time so far: {"nvrtc_s", "nvcc_s", "disk_s", "builds", "disk_hits"}
    (builds served from memory cost nothing and are not counted)."""
    return dict(_stats)


def cubin_kernels(cubin: bytes) -> list[str]:
    """The (mangled) names of the kernels in a cubin: each entry function has a ``.nv.info.<name>`` section,
    device functions do not."""
    return sorted({m.decode() for m in re.findall(rb"\.nv\.info\.([^\x00]+)\x00", cubin)})


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


# --- loading ------------------------------------------------------------------------------------------

def loads_ptx(comp: Compiled) -> bool:
    """Under ``BOOK_ARCH`` a build for the emulated arch loads as PTX: the driver JIT-compiles it for the
    real GPU, on which a cubin of an older major arch would not load."""
    from .gpu import emulated_arch
    return emulated_arch() is not None and comp.arch == emulated_arch()


def load(src: KernelSource):
    """The CuPy RawModule for ``src`` on the current device; recompiled when the file changed. Raises
    :class:`utils.gpu.MissingFeature` (one line) where the GPU, or the emulated arch, lacks a feature
    the source requires."""
    from .gpu import require
    require(*src.requires, needed_by=src.file)
    import cupy

    comp = compile_source(src)
    cache_key = id(comp)
    mod = _modules.get(cache_key)
    if mod is None:
        image, suffix = (comp.ptx.encode(), ".ptx") if loads_ptx(comp) else (comp.cubin, ".cubin")
        name = hashlib.sha256(image).hexdigest()[:24] + suffix
        path = Path(tempfile.gettempdir()) / "fa2-book-modules" / name
        if not path.exists():
            atomic_write(path, image)
        mod = _NamedModule(cupy.RawModule(path=str(path)), comp.symbols)
        _modules[cache_key] = mod
    return mod


class _NamedModule:
    """RawModule that also resolves template name expressions to their mangled names."""

    def __init__(self, raw, symbols: dict[str, str]):
        self.raw, self.symbols = raw, symbols

    def get_function(self, name: str):
        return self.raw.get_function(self.symbols.get(name, name))


def ptx(src: KernelSource, arch: str | None = None) -> str:
    """The PTX of ``src`` for its arch (NVRTC to PTX only, no ptxas run; nvcc sources: their build's)."""
    arch = src.arch(arch)
    if src.compiler == "nvcc":
        return compile_source(src, arch).ptx
    return nvrtc_compile(src, "compute_" + arch[len("sm_"):]).ptx


def sass(src: KernelSource, kernel: str | None = None) -> str:
    """SASS of the compiled cubin through cuobjdump (present on GPU hosts with the CUDA toolkit)."""
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


def _stat_signature(paths) -> tuple:
    out = []
    for p in paths:
        try:
            st = os.stat(p)
            out.append((st.st_mtime_ns, st.st_size))
        except FileNotFoundError:
            out.append(None)
    return tuple(out)


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
