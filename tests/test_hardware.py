"""Hardware facts without a GPU: the documented parts, the device path on a fake runtime, the table."""
import sys
import types

import pytest

from utils import hardware
from utils.gpu import has_gpu
from utils.hardware import DATASHEET, DEVICE_ATTRIBUTES, Fact, Facts, datasheet, facts

REQUIRED = {"sms", "l2_bytes", "smem_per_sm", "smem_per_block_optin", "reserved_smem_per_block",
            "regs_per_sm", "regs_per_block", "max_threads_per_sm", "max_blocks_per_sm", "warp_size",
            "sm_clock_khz", "mem_bus_bits", "hbm_bytes"}
SOURCE_KINDS = ("device: ", "driver: ", "datasheet: ", "datasheet lead: ", "architecture: ", "recorded: ")


@pytest.mark.parametrize("part", sorted(hardware.PARTS))
def test_every_part_has_the_same_labelled_facts(part):
    f = facts(part=part)
    assert REQUIRED <= set(f), REQUIRED - set(f)
    assert set(f) == set(facts(part="H200"))
    for name, fact in f.items():
        assert fact.source.startswith(SOURCE_KINDS), (name, fact.source)
        assert isinstance(fact.value, (int, str)) and not isinstance(fact.value, bool), (name, fact.value)
    assert not f.on_device and f.part == part


def test_hopper_and_ampere_per_sm_limits():
    h, a = facts(part="H200"), facts(part="A100")
    per_block = ("sms", "smem_per_sm", "smem_per_block_optin", "reserved_smem_per_block")
    assert [h[n].value for n in per_block] == [132, 228 << 10, 227 << 10, 1024]
    assert [a[n].value for n in per_block] == [108, 164 << 10, 163 << 10, 1024]
    for f in (h, a):
        assert (f.regs_per_sm, f.regs_per_block, f.max_threads_per_sm, f.max_blocks_per_sm, f.warp_size) == \
            (65536, 65536, 2048, 32, 32)
        rules = (f.reg_alloc_unit, f.smem_alloc_unit, f.reg_sub_partitions, f.max_regs_per_thread)
        assert rules == (256, 128, 4, 255)
    assert "compute capability 9.0" in h["smem_per_sm"].source
    assert "compute capability 8.0" in a["smem_per_sm"].source


def test_the_h200_l2_is_not_labelled_a_datasheet_figure():
    src = facts(part="H200")["l2_bytes"].source
    assert facts(part="H200").l2_bytes == 62_914_560
    assert src.startswith("recorded: ") and "62,914,560" in src and "gives no L2 size" in src, src
    assert "50 MB" in facts(part="H100")["l2_bytes"].source


@pytest.mark.parametrize("part", sorted(hardware.PARTS))
def test_parts_agree_with_the_datasheet_table(part):
    f, d = facts(part=part), DATASHEET[part]
    assert f.sms == d["sms"]
    assert f.l2_bytes == d["l2_mb"] * 2**20               # NVIDIA's L2 "MB" are MiB
    assert f.smem_per_sm == d["smem_per_sm_kb"] * 1024
    assert f.hbm_bytes == d["hbm_gb"] * 2**30
    assert f.sm_clock_khz == d["boost_mhz"] * 1000


def test_unknown_part_and_unknown_architecture():
    with pytest.raises(ValueError, match=r"expected a part among \['A100', 'H100', 'H200'\], got 'B200'"):
        facts(part="B200")
    with pytest.raises(LookupError, match="compute capability 6.0"):
        hardware.allocation_facts("6.0")
    assert facts(part="h100").part == "H100"


def test_without_a_gpu_the_default_is_the_h200():
    if has_gpu():
        pytest.skip("a GPU is present: facts() reads it (tests/gpu/test_occupancy_gpu.py)")
    assert dict(facts()) == dict(facts(part="H200"))


def test_attribute_access_gives_values_and_indexing_gives_facts():
    f = facts(part="H200")
    assert f.sms == 132 and f["sms"] == Fact(132, "SMs", f["sms"].source)
    with pytest.raises(AttributeError, match="no hardware fact 'sm_count'; known: name, cc, sms"):
        getattr(f, "sm_count")
    with pytest.raises(KeyError):
        f["sm_count"]
    assert len(f) == len(list(f)) and "Facts H200" in repr(f)


def test_table_renders_as_markdown_and_html():
    f = Facts("X", False, {"a": Fact(1234567, "bytes", "test: a|b"), "b": Fact("<9.0>", "", "test: c")})
    md = f.table()._repr_markdown_()
    assert md.splitlines()[:3] == ["| name | value | unit | source |", "|---|---|---|---|",
                                   "| a | 1,234,567 | bytes | test: a\\|b |"]
    html = f.table(["b"])._repr_html_()
    assert "<th>source</th>" in html and "<td>&lt;9.0&gt;</td>" in html and "1,234,567" not in html
    with pytest.raises(ValueError, match=r"expected names of hardware facts \(a, b\), got \['c'\]"):
        f.table(["c"])


class FakeRuntime:
    """cupy.cuda.runtime as the H200 answers it: attributes by their CUDA enum number."""

    ANSWERS = {16: 132, 38: 62914560, 81: 233472, 97: 232448, 111: 1024, 82: 65536, 12: 65536, 39: 2048,
               1: 1024, 106: 32, 10: 32, 13: 1980000, 37: 6016, 75: 9, 76: 0}

    def deviceGetAttribute(self, attr, device):
        return self.ANSWERS[attr]

    def getDeviceProperties(self, device):
        return {"name": b"NVIDIA H200", "totalGlobalMem": 150_000_000_000}


def test_device_facts_read_each_attribute_by_its_number(monkeypatch):
    fake = types.ModuleType("cupy")
    fake.cuda = types.SimpleNamespace(runtime=FakeRuntime())
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(hardware, "require_gpu", lambda: None)
    hardware.device_facts.cache_clear()
    try:
        f = hardware.device_facts(0)
    finally:
        hardware.device_facts.cache_clear()
    documented = facts(part="H200")
    assert f.on_device and f.part == "NVIDIA H200" and set(f) == set(documented)
    for name in set(f) - {"name", "hbm_bytes"}:
        assert f[name].value == documented[name].value, name
    assert f["l2_bytes"].source == "device: cudaDeviceGetAttribute(cudaDevAttrL2CacheSize)"
    assert f["hbm_bytes"] == Fact(150_000_000_000, "bytes", "device: cudaGetDeviceProperties.totalGlobalMem")
    assert f.cc == "9.0" and f["reg_alloc_unit"].source.startswith("architecture: cuda_occupancy.h")


def test_attribute_numbers_match_the_cuda_headers():
    runtime = pytest.importorskip("cuda.bindings.runtime")
    for fact, (enum, number, _) in DEVICE_ATTRIBUTES.items():
        assert int(getattr(runtime.cudaDeviceAttr, enum)) == number, (fact, enum)
    for enum, number in hardware.CC_ATTRIBUTES:
        assert int(getattr(runtime.cudaDeviceAttr, enum)) == number, enum


def test_datasheet_lookup_still_works():
    assert datasheet("NVIDIA H200")["l2_mb"] == 60 and datasheet("NVIDIA A100-SXM4-80GB")["part"] == "A100"
    with pytest.raises(KeyError, match="known parts"):
        datasheet("NVIDIA B200")
