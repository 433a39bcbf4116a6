"""Every kernel in kernels/ compiles for its arch, and every one without a Hopper requirement for sm_80
too (what an A100 builds, and what BOOK_ARCH=sm_80 loads as PTX); spill-free kernels report no spills
in the build the book is timed with (the H200's; ptxas allocates differently for sm_80).

Runs on a CPU: NVRTC (or nvcc, for sources that ask for it) compiles to a cubin and returns the ptxas
report. Builds go through the disk cache, so a second run of this file compiles only what changed.
"""
import re

import pytest

import utils.build as b
from kernels import all_sources
from tests.build_helpers import emulating
from utils.build import DEFAULT_ARCH, compile_source
from utils.gpu import arch_has

SOURCES = all_sources()
AMPERE = "sm_80"


def runs_on_ampere(src) -> bool:
    return all(arch_has(AMPERE, f) for f in src.requires)


# (module, attribute, source, arch): each source for the arch it builds for on the H200, and for sm_80
# where it has no Hopper requirement
BUILDS = [(m, a, s, s.arch(DEFAULT_ARCH)) for m, a, s in SOURCES] + \
         [(m, a, s, AMPERE) for m, a, s in SOURCES if runs_on_ampere(s)]
IDS = [f"{m}.{a}-{arch}" for m, a, _, arch in BUILDS]
AMPERE_SOURCES = [(m, a, s) for m, a, s in SOURCES if runs_on_ampere(s)]


def compiled(src, arch):
    """compile_source, skipping (with the reason) where the source's compiler is not installed."""
    if src.compiler == "nvcc":
        try:
            b.find_nvcc()
        except b.ToolchainMissing as e:
            pytest.skip(str(e))
    return compile_source(src, arch=arch)


@pytest.mark.parametrize("mod,attr,src,arch", BUILDS, ids=IDS)
def test_kernel_compiles_without_spills(mod, attr, src, arch):
    comp = compiled(src, arch)
    assert comp.arch == arch and comp.report, f"{src.file} ({arch}): ptxas reported no kernels"
    assert set(re.findall(r"Compiling entry function '[^']+' for '(\w+)'", comp.log)) == {arch}, src.file
    if src.spill_free and arch == src.arch(DEFAULT_ARCH):
        spills = {k: (r["spill_stores"], r["spill_loads"]) for k, r in comp.report.items()
                  if r["spill_stores"] or r["spill_loads"]}
        assert not spills, f"{src.file} ({arch}): kernels marked spill-free spill (stores, loads bytes): " \
                           f"{spills}"


@pytest.mark.parametrize("mod,attr,src,arch", BUILDS, ids=IDS)
def test_the_ptxas_report_covers_every_kernel_in_the_cubin(mod, attr, src, arch):
    """compile_source rebuilds when a cached build's log misses kernels, so no report lookup can fail."""
    comp = compiled(src, arch)
    assert set(b.cubin_kernels(comp.cubin)) == set(comp.report), f"{src.file} ({arch})"


@pytest.mark.parametrize("mod,attr,src", AMPERE_SOURCES, ids=[f"{m}.{a}" for m, a, _ in AMPERE_SOURCES])
def test_under_book_arch_sm80_every_kernel_loads_as_compute_80_ptx(monkeypatch, mod, attr, src):
    """What BOOK_ARCH=sm_80 loads on the H200: PTX for sm_80 (the driver JIT-compiles it), holding an
    entry for every kernel of the sm_80 cubin the report comes from."""
    emulating(monkeypatch, AMPERE)
    comp = compiled(src, None)
    assert comp.arch == AMPERE and b.loads_ptx(comp)
    directives = [line.split() for line in comp.ptx.splitlines() if line.startswith(".")]
    assert directives[0][0] == ".version" and directives[1][:2] == [".target", AMPERE], directives[:2]
    missing = [k for k in comp.report if f".entry {k}(" not in comp.ptx]
    assert not missing, f"{src.file}: kernels without a PTX entry: {missing}"


def test_every_cu_file_is_declared():
    """A KernelSource names every .cu file, except those a kernels module lists in LIBRARY_SOURCES (built by nvcc
    into a shared library: kernels/cutlass_gemm)."""
    from kernels import op_modules
    from utils.paths import KERNELS
    declared = {src.file for _, _, src in SOURCES}
    declared |= {f for mod in op_modules() for f in getattr(mod, "LIBRARY_SOURCES", ())}
    files = {str(p.relative_to(KERNELS)) for p in KERNELS.rglob("*.cu")}
    assert files <= declared, f"kernels/**/*.cu without a KernelSource in a kernels module: " \
                              f"{files - declared}"
