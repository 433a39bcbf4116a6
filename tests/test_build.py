"""utils.build without a GPU: the ptxas report, includes, requirements and arch, BOOK_ARCH emulation,
PTX, and nvcc with the CUTLASS/CuTe headers. The disk cache has its own file (test_build_cache.py)."""
import pytest

import utils.build as b
import utils.gpu as gpu
from tests.build_helpers import (CUTE_SMOKE, cutlass_or_skip, emulating, fake_gpu, nvcc_or_skip,
                                 scratch_kernels)
from utils.build import (CompileError, KernelSource, ToolchainMissing, compile_source, local_includes,
                         parse_ptxas)

PTXAS = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k_a' for 'sm_90'
ptxas info    : Function properties for k_a
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 0 barriers, 4096 bytes smem
ptxas info    : Compiling entry function 'k_b' for 'sm_90'
ptxas info    : Function properties for k_b
ptxas         .     16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers
"""
SCALE = 'extern "C" __global__ void scale(float* y) { y[threadIdx.x] *= 2.f; }\n'
# a cluster kernel: what sm_80 rejects (`__cluster_dims__ is not supported for this GPU architecture`)
CLUSTERED = ('extern "C" __global__ void __cluster_dims__(2, 1, 1) pair(float* y) '
             '{ y[threadIdx.x] *= 2.f; }\n')


def test_parse_ptxas():
    r = parse_ptxas(PTXAS)
    assert r["k_a"] == dict(registers=10, smem_bytes=4096, stack_bytes=0, spill_stores=0, spill_loads=0)
    assert r["k_b"]["spill_stores"] == 8 and r["k_b"]["registers"] == 255


def test_compile_reports_resources_and_follows_includes(tmp_path, monkeypatch):
    kernels = scratch_kernels(monkeypatch, tmp_path)
    (kernels / "include" / "h.cuh").write_text("__device__ inline float twice(float x) { return 2 * x; }\n")
    (kernels / "k.cu").write_text('#include "h.cuh"\nextern "C" __global__ void k(float* y) '
                                  '{ y[threadIdx.x] = twice(y[threadIdx.x]); }\n')
    src = KernelSource("k.cu")
    assert [p.name for p in local_includes(src.path)] == ["k.cu", "h.cuh"]
    c = compile_source(src)
    assert c.arch == "sm_90" and c.cubin[:4] == b"\x7fELF"
    assert "k" in c.report and c.report["k"]["spill_stores"] == 0
    # edit the header: the next compile must see it (no stale cache)
    (kernels / "include" / "h.cuh").write_text("__device__ inline float twice(float x) { return x +; }\n")
    with pytest.raises(CompileError, match="k.cu"):
        compile_source(src)


def test_include_dirs_outside_the_repo_are_searched_but_not_followed(tmp_path, monkeypatch):
    kernels = scratch_kernels(monkeypatch, tmp_path)
    outside = tmp_path.parent / (tmp_path.name + "-wheel") / "include"
    outside.mkdir(parents=True)
    (outside / "w.cuh").write_text("__device__ inline float thrice(float x) { return 3 * x; }\n")
    (kernels / "k.cu").write_text('#include "w.cuh"\nextern "C" __global__ void k(float* y) '
                                  '{ y[threadIdx.x] = thrice(y[threadIdx.x]); }\n')
    with pytest.raises(CompileError, match='"w.cuh" not found'):
        compile_source(KernelSource("k.cu"))
    src = KernelSource("k.cu", include_dirs=(outside,))
    comp = compile_source(src)
    assert [p.name for p in comp.inputs] == ["k.cu"] and "k" in comp.report
    assert f"--include-path={outside}" in src.options("sm_90")


def test_include_dirs_inside_the_repo_are_followed(tmp_path, monkeypatch):
    kernels = scratch_kernels(monkeypatch, tmp_path)
    shared = kernels / "flash" / "include"
    shared.mkdir(parents=True)
    (shared / "tile.cuh").write_text("#define TILE 64\n")
    (kernels / "k.cu").write_text('#include "tile.cuh"\n'
                                  'extern "C" __global__ void k(float* y) { y[TILE] = 1; }\n')
    assert [p.name for p in local_includes(kernels / "k.cu", (str(shared),))] == ["k.cu", "tile.cuh"]


def test_a_missing_include_dir_is_named(tmp_path, monkeypatch):
    kernels = scratch_kernels(monkeypatch, tmp_path)
    (kernels / "k.cu").write_text(SCALE)
    with pytest.raises(CompileError, match="include dir .*nowhere does not exist"):
        compile_source(KernelSource("k.cu", include_dirs=(str(tmp_path / "nowhere"),)))


@pytest.mark.parametrize("kwargs,message", [
    (dict(requires=("clusterz",)), "unknown feature 'clusterz'; expected one of"),
    (dict(requires="clusters"), "requires expects a tuple of strings, got the string 'clusters'"),
    (dict(compiler="clang"), r"compiler expects one of \('nvrtc', 'nvcc'\), got 'clang'"),
    (dict(compiler="nvcc", name_expressions=("k<1>",)), "nvcc builds take no name_expressions"),
])
def test_kernel_source_rejects_bad_declarations(kwargs, message):
    with pytest.raises(ValueError, match=message):
        KernelSource("x.cu", **kwargs)


@pytest.mark.parametrize("requires,running,arch", [
    ((), "sm_90", "sm_90"),
    ((), "sm_80", "sm_80"),
    (("cp.async", "bf16-mma"), "sm_86", "sm_86"),
    (("clusters",), "sm_90", "sm_90"),
    (("tma",), "sm_80", "sm_90"),              # the build exists for the report; load() refuses it
    (("clusters",), "sm_100", "sm_100"),
    (("wgmma",), "sm_90", "sm_90a"),
    (("clusters", "setmaxnreg"), "sm_80", "sm_90a"),
])
def test_the_arch_follows_the_requirements(requires, running, arch):
    assert KernelSource("x.cu", requires=requires).arch(running) == arch


def test_book_arch_is_validated(monkeypatch):
    emulating(monkeypatch, "sm_75")
    with pytest.raises(ValueError, match=r"BOOK_ARCH='sm_75'.*sm_80, sm_86, sm_89, sm_90, sm_90a"):
        gpu.emulated_arch()


def test_book_arch_is_read_once(monkeypatch):
    emulating(monkeypatch, "sm_86")
    assert gpu.emulated_arch() == "sm_86"
    monkeypatch.setenv(gpu.ARCH_ENV, "sm_80")
    assert gpu.emulated_arch() == "sm_86" and b.running_arch() == "sm_86"


def test_emulating_sm80_on_an_h200_drops_the_hopper_features(monkeypatch):
    emulating(monkeypatch, "sm_80")
    fake_gpu(monkeypatch, "NVIDIA H200", (9, 0))
    assert b.running_arch() == "sm_80"
    present = {f: gpu.supports(f) for f in gpu.FEATURES}
    assert present == {"cp.async": True, "bf16-mma": True, "clusters": False, "tma": False, "wgmma": False,
                       "setmaxnreg": False}
    assert KernelSource("x.cu").arch() == "sm_80"
    assert KernelSource("x.cu", requires=("clusters",)).arch() == "sm_90"
    assert KernelSource("x.cu", requires=("wgmma",)).arch() == "sm_90a"


def test_without_emulation_the_h200_has_every_feature(monkeypatch):
    emulating(monkeypatch, None)
    fake_gpu(monkeypatch, "NVIDIA H200", (9, 0))
    assert b.running_arch() == "sm_90"
    assert all(gpu.supports(f) for f in gpu.FEATURES)


def test_emulating_a_newer_gpu_than_the_device_is_refused(monkeypatch):
    emulating(monkeypatch, "sm_90")
    fake_gpu(monkeypatch, "NVIDIA A100-SXM4-80GB", (8, 0))
    with pytest.raises(ValueError, match="BOOK_ARCH=sm_90 emulates a newer GPU than this sm_80"):
        b.running_arch()


def test_the_requires_magic_prints_one_line_naming_the_emulation(monkeypatch, capsys):
    pytest.importorskip("IPython", reason="IPython (ipykernel) is not installed")
    from utils.notebook import requires_magic
    emulating(monkeypatch, "sm_80")
    fake_gpu(monkeypatch, "NVIDIA H200", (9, 0))
    requires_magic("clusters cp.async", "raise AssertionError('the cell ran')")
    assert capsys.readouterr().out == ("skipped: this cell needs clusters, which NVIDIA H200 emulating sm_80 "
                                       "(BOOK_ARCH=sm_80) lacks.\n")


def test_an_a100_is_named_with_its_arch(monkeypatch):
    emulating(monkeypatch, None)
    fake_gpu(monkeypatch, "NVIDIA A100-SXM4-80GB", (8, 0))
    with pytest.raises(gpu.MissingFeature) as e:
        gpu.require("cp.async", "wgmma", "tma")
    assert str(e.value) == "this cell needs wgmma, tma, which NVIDIA A100-SXM4-80GB (sm_80) lacks"


def test_load_refuses_a_cluster_source_under_emulation(tmp_path, monkeypatch):
    kernels = scratch_kernels(monkeypatch, tmp_path)
    (kernels / "pair.cu").write_text(CLUSTERED)
    emulating(monkeypatch, "sm_80")
    fake_gpu(monkeypatch, "NVIDIA H200", (9, 0))
    src = KernelSource("pair.cu", requires=("clusters",))
    lacks = r"^pair.cu needs clusters, which NVIDIA H200 emulating sm_80 \(BOOK_ARCH=sm_80\) lacks$"
    with pytest.raises(gpu.MissingFeature, match=lacks):
        b.load(src)
    comp = compile_source(src)        # the compile check still builds it, for sm_90
    assert comp.arch == "sm_90" and "pair" in comp.report and not b.loads_ptx(comp)


def test_emulation_builds_ptx_for_compute_80_and_the_report_from_an_sm80_cubin(tmp_path, monkeypatch):
    kernels = scratch_kernels(monkeypatch, tmp_path)
    (kernels / "k.cu").write_text(SCALE)
    emulating(monkeypatch, "sm_80")
    comp = compile_source(KernelSource("k.cu"))
    assert comp.arch == "sm_80" and b.loads_ptx(comp)
    assert ptx_target(comp.ptx) == "sm_80" and ".entry scale(" in comp.ptx
    assert "Compiling entry function 'scale' for 'sm_80'" in comp.log
    assert comp.report["scale"]["registers"] > 0
    emulating(monkeypatch, None)
    assert not b.loads_ptx(comp)      # a plain run loads the cubin


def ptx_target(text: str) -> str:
    """The arch of a PTX file's `.target` directive, which must follow `.version` before any code."""
    directives = [line.split() for line in text.splitlines() if line.startswith(".")]
    assert directives[0][0] == ".version" and directives[1][0] == ".target", directives[:2]
    return directives[1][1].rstrip(",")


def test_ptx_without_a_driver(tmp_path, monkeypatch):
    kernels = scratch_kernels(monkeypatch, tmp_path)
    (kernels / "k.cu").write_text('template <int N> __global__ void k(float4* y) '
                                  '{ y[threadIdx.x].x *= N; }\n')
    text = b.ptx(KernelSource("k.cu", name_expressions=("k<3>",)))
    assert ".entry _Z1kILi3EEvP6float4" in text and ptx_target(text) == "sm_90"
    (kernels / "bad.cu").write_text("__global__ void k() { syntax error }\n")
    with pytest.raises(CompileError, match="bad.cu"):
        b.ptx(KernelSource("bad.cu"))


# --- nvcc and the CUTLASS/CuTe headers -------------------------------------------------------------


def test_cutlass_include_dirs_hold_cute_and_the_util_headers():
    include, util = cutlass_or_skip()
    assert include.endswith("cutlass_library/source/include") and util.endswith("source/tools/util/include")
    from pathlib import Path
    assert (Path(include) / "cute" / "tensor.hpp").exists()
    assert (Path(include) / "cutlass" / "cutlass.h").exists()
    assert (Path(util) / "cutlass" / "util").is_dir()
    assert "nvidia_cutlass-" in b.include_dir_identity(include)   # keyed by the wheel's version


def test_nvcc_builds_a_cute_kernel_with_the_cutlass_headers(tmp_path, monkeypatch):
    nvcc_or_skip()
    dirs = cutlass_or_skip()
    kernels = scratch_kernels(monkeypatch, tmp_path)
    (kernels / "cute_smoke.cu").write_text(CUTE_SMOKE)
    src = KernelSource("cute_smoke.cu", compiler="nvcc", include_dirs=dirs)
    before = b.compile_stats()
    comp = compile_source(src)
    after = b.compile_stats()
    assert after["builds"] == before["builds"] + 1 and after["nvcc_s"] > before["nvcc_s"]
    assert comp.compiler == "nvcc" and comp.arch == "sm_90" and comp.cubin[:4] == b"\x7fELF"
    assert b.cubin_kernels(comp.cubin) == ["cute_smoke_transpose"]
    assert comp.report["cute_smoke_transpose"]["smem_bytes"] == 32 * 33 * 4
    assert comp.report["cute_smoke_transpose"]["spill_stores"] == 0
    assert ".entry cute_smoke_transpose(" in comp.ptx and ptx_target(comp.ptx) == "sm_90"
    b.clear_memory_cache()             # a new process: served from disk, nvcc not run again
    again = compile_source(src)
    assert again.cubin == comp.cubin and b.compile_stats()["disk_hits"] == before["disk_hits"] + 1


def test_nvcc_options_are_the_cutlass_build_flags(tmp_path, monkeypatch):
    scratch_kernels(monkeypatch, tmp_path)
    src = KernelSource("k.cu", compiler="nvcc", include_dirs=("/opt/inc",), defines=(("TILE", "64"),),
                       requires=("wgmma",))
    opts = src.options(src.arch())
    for flag in ("-cubin", "-std=c++17", "-O3", "--expt-relaxed-constexpr", "-DNDEBUG", "-arch=sm_90a",
                 "-I/opt/inc", "-DTILE=64"):
        assert flag in opts, flag
    assert opts[opts.index("-Xptxas") + 1] == "-v"


def test_nvcc_reports_compile_errors_with_its_log(tmp_path, monkeypatch):
    nvcc_or_skip()
    kernels = scratch_kernels(monkeypatch, tmp_path)
    (kernels / "bad.cu").write_text('extern "C" __global__ void k(float* y) { y[0] = undefined_name; }\n')
    with pytest.raises(
            CompileError, match=r"(?s)bad.cu \(sm_90\) failed to compile with nvcc.*undefined_name"):
        compile_source(KernelSource("bad.cu", compiler="nvcc"))


def test_missing_nvcc_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(b, "nvcc_candidates", lambda: [])
    b.find_nvcc.cache_clear()
    try:
        with pytest.raises(ToolchainMissing, match="nvcc not found on PATH.*pip install nvidia-cuda-nvcc"):
            b.find_nvcc()
    finally:
        b.find_nvcc.cache_clear()
