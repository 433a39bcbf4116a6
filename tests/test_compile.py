"""Every kernel in kernels/ compiles with NVRTC for its arch; spill-free kernels report no spills.

Runs on a CPU: NVRTC (through cuda.core) compiles to a cubin and returns the ptxas report.
"""
import pytest

from kernels import all_sources
from utils.build import compile_source

SOURCES = all_sources()


@pytest.mark.parametrize("mod,attr,src", SOURCES, ids=[f"{m}.{a}" for m, a, _ in SOURCES])
def test_kernel_compiles_without_spills(mod, attr, src):
    comp = compile_source(src, arch="sm_90")
    assert comp.report, f"{src.file}: ptxas reported no kernels"
    if src.spill_free:
        spills = {k: (r["spill_stores"], r["spill_loads"]) for k, r in comp.report.items()
                  if r["spill_stores"] or r["spill_loads"]}
        assert not spills, f"{src.file}: kernels marked spill-free spill (stores, loads bytes): {spills}"


def test_every_cu_file_is_declared():
    from utils.paths import KERNELS
    declared = {src.file for _, _, src in SOURCES}
    files = {p.name for p in KERNELS.glob("*.cu")}
    assert files <= declared, f"kernels/*.cu without a KernelSource in a kernels/*.py: {files - declared}"


@pytest.mark.parametrize("mod,attr,src", SOURCES, ids=[f"{m}.{a}" for m, a, _ in SOURCES])
def test_the_ptxas_report_covers_every_kernel_in_the_cubin(mod, attr, src):
    """compile_source rebuilds when a cached build's log misses kernels, so no report lookup can fail."""
    from utils.build import cubin_kernels
    comp = compile_source(src, arch="sm_90")
    assert set(cubin_kernels(comp.cubin)) == set(comp.report), src.file
