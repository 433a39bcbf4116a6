"""Chapter 12 host side on a CPU: the hgemm registry and its plans (instances, grids, shared memory, the 16-byte
path's conditions, config validation), ``problem``'s ValueErrors, the float64 reference, the shared-memory
layouts (Python model against the C++ functors, compiled with g++) and the ldmatrix bank model, the mma.sync
ceiling's fragments, and v1 -> v2's diff."""
import shutil
import subprocess

import numpy as np
import pytest

from kernels import hgemm as H
from kernels.hgemm import ladders, smem
from tests.fakes import FakeDeviceArray
from utils.arrays import bf16
from utils.paths import KERNELS
from utils.version import Unsupported


def arrays(M, N, K, *, offs=(0, 0, 0), dtype=None):
    """Fake bf16 device arrays a, b, c, ``offs`` elements past 256-byte aligned bases far apart."""
    dtype = bf16() if dtype is None else dtype
    bases = (1 << 36, 2 << 36, 3 << 36)
    return tuple(FakeDeviceArray(s, dtype, ptr=base + 2 * o)
                 for s, base, o in zip(((M, K), (K, N), (M, N)), bases, offs))


# --- the registry and the plans ----------------------------------------------------------------------------

AMPERE = ["v0_wmma", "v1_mma", "v2_swizzle", "v3_pipeline"]
HOPPER = ["v4_wgmma", "v5_warp_specialized", "v6_persistent", "v7_multicast", "v8_tma_store"]


def test_the_ladder_is_v0_to_v6_each_with_its_file_snippet_parent_and_arch():
    assert list(H.HGEMM) == AMPERE + HOPPER
    from utils.show import snippets
    parent = None
    for v in H.HGEMM.values():
        assert v.parent == parent
        text = (KERNELS / v.source.file).read_text()
        assert v.snippet in snippets(text) and v.name in text
        assert v.requires == ("bf16-mma",) if v.label in AMPERE else "wgmma" in v.requires
        assert v.source.arch("sm_90") == ("sm_90" if v.label in AMPERE else "sm_90a")
        parent = v.label


@pytest.mark.parametrize("label", AMPERE)
@pytest.mark.parametrize("shape", [(1, 1, 1), (37, 199, 1823), (4096, 4096, 4096), (4095, 4097, 4095),
                                   (1, 12288, 4096)])
def test_every_ampere_plan_launches_an_instantiated_kernel_covering_c(label, shape):
    v = H.HGEMM[label]
    M, N, K = shape
    for c in v.all_configs():
        (ln,) = v.launches(v.validate(*arrays(*shape)), c)
        assert ln.kernel in v.source.name_expressions
        assert ln.block == (H.threads_of(c), 1, 1)
        blocks = ln.grid[0] * ln.grid[1]
        assert blocks == -(-M // c.bm) * -(-N // c.bn)
        assert ln.smem == (H.smem_bytes(c) if label == "v3_pipeline" else 0)


@pytest.mark.parametrize("label", HOPPER)
@pytest.mark.parametrize("shape", [(1, 8, 8), (37, 200, 1824), (4096, 4096, 4096), (1, 12288, 4096)])
def test_hopper_plans_launch_one_block_per_tile_with_tma_maps_of_the_operands(label, shape):
    """On a CPU the plan carries each map's validated TiledSpec: A in boxes of bm x 64, B in boxes of 64 x 64,
    both 128-byte swizzled, over the operands' memory."""
    v = H.HGEMM[label]
    M, N, K = shape
    a, b, c = arrays(*shape)
    (ln,) = v.launches(v.validate(a, b, c))
    cfg = v.default(None)
    tiles_m, tiles_n = -(-M // cfg.bm), -(-N // cfg.bn)
    cluster = 2 if label in ("v7_multicast", "v8_tma_store") else 1
    assert ln.kernel in v.source.name_expressions and ln.source is None and ln.cluster == cluster
    assert ln.grid == ((tiles_m * tiles_n if cluster == 1 else 2 * -(-tiles_m // 2) * tiles_n), 1, 1)
    assert ln.block == ((128 if label == "v4_wgmma" else 384), 1, 1)
    barriers = 2 * cfg.stages * 8 if cluster == 2 else 0
    staging = 2 * 64 * 64 * 2 if label == "v8_tma_store" else 0
    assert ln.smem == cfg.stages * 2 * 64 * (cfg.bm + cfg.bn) + 1024 + barriers + staging <= 227 * 1024
    assert ln.persistent == (label in ("v6_persistent", "v7_multicast", "v8_tma_store"))
    map_a, map_b = ln.args[3], ln.args[4]
    assert (map_a.shape, map_a.box, map_a.swizzle, map_a.address) == ((M, K), (cfg.bm, 64), 128, a.__cuda_array_interface__["data"][0])
    assert (map_b.shape, map_b.box, map_b.swizzle, map_b.address) == ((K, N), (64, 64), 128, b.__cuda_array_interface__["data"][0])
    if label == "v8_tma_store":
        map_c = ln.args[5]
        assert (map_c.shape, map_c.box, map_c.swizzle, map_c.address) == ((M, N), (64, 64), 128, c.__cuda_array_interface__["data"][0])
    else:
        assert ln.args[5] is c


def test_v8_runs_v7_where_tma_cannot_write_c():
    v = H.HGEMM["v8_tma_store"]
    for shape, offs in [((64, 64, 64), (0, 0, 8)), ((64, 64, 64), (0, 0, 2))]:
        launches = v.launches(v.validate(*arrays(*shape, offs=offs)))
        assert not H.is_fallback(launches)
        (ln,) = launches
        assert ln.kernel == H.v7_name(H.V7_CONFIG) and ln.source is H.V7_SOURCE
    assert H.is_fallback(v.launches(v.validate(*arrays(64, 60, 64))))


@pytest.mark.parametrize("label", HOPPER)
@pytest.mark.parametrize("shape,offs", [((37, 199, 1823), (0, 0, 0)), ((64, 64, 60), (0, 0, 0)),
                                        ((64, 64, 64), (4, 0, 0)), ((64, 64, 64), (0, 8, 0)),
                                        ((4095, 4097, 4095), (0, 0, 0))])
def test_hopper_plans_pack_what_tma_cannot_read(label, shape, offs):
    from utils.version import Workspace
    v = H.HGEMM[label]
    a, b, c = arrays(*shape, offs=offs)
    M, N, K = shape
    K8, N8 = -(-K // 8) * 8, -(-N // 8) * 8
    launches = v.launches(v.validate(a, b, c))
    assert H.is_fallback(launches)
    pack_a, pack_b, gemm, unpack = launches
    assert [ln.kernel for ln in (pack_a, pack_b, unpack)] == ["hgemm_pack", "hgemm_pack", "hgemm_unpack"]
    wa, wb, wc = gemm.args[3:]
    assert all(isinstance(w, Workspace) for w in (wa, wb, wc))
    assert (wa.shape, wb.shape, wc.shape) == ((M, K8), (K8, N8), (M, N8))
    # A [M, K] into wa [M, K8]; B [K, N] into wb [K8, N8], the rows below K zero; C's first N columns out of wc
    assert pack_a.args[0] is a and pack_a.args[3] is wa and [int(x) for x in pack_a.args[1:3] + pack_a.args[4:]] == [M, K, M, K8]
    assert pack_b.args[0] is b and pack_b.args[3] is wb and [int(x) for x in pack_b.args[1:3] + pack_b.args[4:]] == [K, N, K8, N8]
    assert unpack.args[0] is wc and unpack.args[2] is c and [int(x) for x in (unpack.args[1], *unpack.args[3:])] == [N8, M, N]
    assert gemm.source is H.V3_SOURCE and gemm.kernel == H.v3_name(H.V3_DEFAULT, True)
    assert [int(x) for x in gemm.args[:3]] == [M, N8, K8]


def test_hopper_configs_are_checked():
    for c, why in [(H.Hopper(96, 128, 4, 8), "multiple of 64"), (H.Hopper(128, 192, 4, 8), "128 or 256"),
                   (H.Hopper(128, 256, 1, 8), "stages"), (H.Hopper(256, 256, 4, 8), "shared memory")]:
        with pytest.raises(Unsupported, match=why):
            H.check_hopper("probe", c)
    with pytest.raises(Unsupported, match="128 rows"):
        H.check_hopper("probe", H.Hopper(64, 256, 4, 8), bm=128)


@pytest.mark.parametrize("shape,offs,vec", [
    ((4096, 4096, 4096), (0, 0, 0), True), ((64, 64, 64), (0, 0, 2), True),     # C needs only 4 bytes
    ((64, 64, 64), (0, 0, 1), False), ((64, 64, 64), (4, 0, 0), False), ((64, 64, 64), (0, 8, 0), True),
    ((64, 64, 60), (0, 0, 0), False), ((64, 60, 64), (0, 0, 0), False), ((4095, 4097, 4095), (0, 0, 0), False)])
def test_the_16_byte_instance_runs_exactly_where_its_conditions_hold(shape, offs, vec):
    for v in (H.HGEMM[lab] for lab in AMPERE):
        (ln,) = v.launches(v.validate(*arrays(*shape, offs=offs)))
        assert ln.kernel.endswith(", true>" if vec else ", false>"), (v.label, ln.kernel)


def test_every_config_fits_an_a100_and_the_bad_ones_are_refused():
    for c in H.V3_CONFIGS:
        H.check_config("v3", c)
        assert H.smem_bytes(c) <= 163 * 1024
    for c, why in [(H.Pipe(128, 128, 32, 48, 32, 3, 8), "divide"), (H.Pipe(128, 128, 24, 64, 32, 3, 8), "multiples of 16"),
                   (H.Pipe(128, 128, 32, 64, 32, 1, 8), "stages"), (H.Pipe(256, 256, 64, 64, 64, 3, 8), "A100"),
                   (H.Pipe(64, 96, 32, 32, 48, 3, 8), "power of two"), (H.Tile(256, 256, 64, 64, 64), "static")]:
        with pytest.raises(Unsupported, match=why):
            H.check_config("probe", c)


@pytest.mark.parametrize("bad,match", [
    (lambda: H.HGEMM["v1_mma"](np.zeros((4, 4), bf16()), *arrays(4, 4, 4)[1:]), "CUDA device array"),
    (lambda: H.HGEMM["v1_mma"](*arrays(4, 4, 4, dtype=np.float32)), "dtype bfloat16"),
    (lambda: H.problem(*arrays(4, 5, 6)[:1], FakeDeviceArray((7, 5), bf16(), ptr=2 << 36), arrays(4, 5, 6)[2]),
     "expected 6 rows"),
    (lambda: H.problem(*arrays(4, 5, 6)[:2], FakeDeviceArray((4, 6), bf16(), ptr=3 << 36)), r"shape \(4, 5\)"),
    (lambda: H.problem(*arrays(4, 5, 6)[:2], FakeDeviceArray((4, 5), bf16(), ptr=3 << 36, strides=(2, 8))),
     "C-contiguous"),
    (lambda: H.problem(*arrays(4, 5, 6)[:2], FakeDeviceArray((4, 5), bf16(), ptr=(2 << 36) + 4)), "overlaps"),
    (lambda: H.problem(*arrays(4, 5, 6)[:2], FakeDeviceArray((4, 5), bf16(), ptr=(3 << 36) + 1)), "aligned"),
    (lambda: H.shape_problem(65536, 32768, 8), "32-bit"),
    (lambda: H.shape_problem(0, 1, 1), "positive int"),
])
def test_bad_arguments_get_a_value_error_that_says_what_was_expected(bad, match):
    with pytest.raises(ValueError, match=match):
        bad()


def test_reference_is_float64_of_the_bf16_values():
    rng = np.random.default_rng(12)
    a = rng.standard_normal((5, 7)).astype(bf16())
    b = rng.standard_normal((7, 3)).astype(bf16())
    ref = H.reference(a, b)
    assert ref.dtype == np.float64
    np.testing.assert_allclose(ref, a.astype(np.float64) @ b.astype(np.float64), rtol=0, atol=0)
    assert H.flops(2, 3, 4) == 48 and H.nbytes(2, 3, 4) == 2 * (8 + 12 + 6)


# --- shared-memory layouts and banks ------------------------------------------------------------------------

LAYOUT_PROGRAM = r"""
#define __device__
#define __forceinline__ inline
#include <algorithm>
#include <cstdio>
using std::min;
%s
int main() {
%s
}
"""


def test_the_python_layouts_are_the_kernels_layouts(tmp_path):
    """Swizzled<COLS>::at and RowMajor<COLS>::at from hgemm_common.cuh, compiled with g++, against smem.py."""
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ is not installed")
    text = (KERNELS / "hgemm" / "hgemm_common.cuh").read_text()
    start, end = text.index("template <int COLS>\nstruct RowMajor"), text.index("// [[/snippet]]", text.index("struct Swizzled"))
    cols = (16, 32, 64, 128, 256)
    body = "\n".join(f'    for (int r = 0; r < 16; ++r) for (int c = 0; c < {n}; ++c) '
                     f'std::printf("%d %d\\n", RowMajor<{n}>::at(r, c), Swizzled<{n}>::at(r, c));' for n in cols)
    (tmp_path / "layouts.cpp").write_text(LAYOUT_PROGRAM % (text[start:end], body))
    subprocess.run([gxx, "-std=c++17", "layouts.cpp", "-o", "layouts"], cwd=tmp_path, check=True)
    got = [tuple(map(int, ln.split())) for ln in
           subprocess.run([str(tmp_path / "layouts")], capture_output=True, text=True, check=True).stdout.split("\n") if ln]
    want = [(smem.row_major(r, c, n), smem.swizzled(r, c, n)) for n in cols for r in range(16) for c in range(n)]
    assert got == want


@pytest.mark.parametrize("cols", [16, 32, 64, 128, 256])
def test_the_swizzle_permutes_whole_chunks_within_each_row(cols):
    for r in range(64):
        offs = [smem.swizzled(r, c, cols) for c in range(cols)]
        assert sorted(offs) == list(range(r * cols, (r + 1) * cols))
        assert all(offs[c] - offs[c - c % 8] == c % 8 for c in range(cols))      # chunks stay whole


def test_the_bank_model_row_major_conflicts_and_the_swizzle_clears_them():
    """v1's tiles: A's 64-byte rows put 4 of the 8 rows of a phase in one bank group, B's 256-byte rows all 8;
    swizzled, every phase of every warp takes one wavefront."""
    m = smem.model(H.V1_TILE)
    assert (m["row-major"]["A"], m["row-major"]["B"]) == (4.0, 8.0)
    # per warp and k-step: 4 m16 blocks x 4 phases of A, 2 n16 blocks x 4 phases of B
    assert m["row-major"]["conflicts per phase"] == pytest.approx((16 * 4 + 8 * 8) / 24 - 1)
    assert m["swizzled"]["all"] == 1.0
    for c in H.V3_CONFIGS:
        assert smem.model(c)["swizzled"]["all"] == 1.0, c


def test_ldsm_conflicts_per_phase_reads_ncu_counters():
    assert smem.conflicts_per_phase({"wavefronts": 130.0, "conflicts": 104.0}) == pytest.approx(4.0)


# --- the mma.sync ceiling's inputs ----------------------------------------------------------------------------

def test_peak_fragments_hold_a_and_b_as_the_mma_reads_them():
    from kernels.mma import fragments as F
    A, B, regs = ladders.peak_fragments(121)
    assert regs.shape == (32, 6) and regs.dtype == np.uint32
    halves = lambda r: np.stack([r & 0xFFFF, r >> 16], axis=-1).reshape(32, -1).astype(np.uint16).view(bf16())
    a_vals, b_vals = halves(regs[:, :4]).astype(np.float64), halves(regs[:, 4:]).astype(np.float64)
    d = F.emulate_mma(a_vals, b_vals, np.zeros((32, 4)))
    np.testing.assert_allclose(F.scatter(d, F.mma_c_layout(), (16, 8)), A @ B, rtol=1e-12)


def test_v2_differs_from_v1_only_in_the_layouts():
    from collections import Counter

    from utils.show import snippet_diff
    diff = snippet_diff("hgemm/v01_mma.cu", "hgemm_v1", "hgemm/v02_swizzle.cu", "hgemm_v2", 0).splitlines()
    code = {sign: Counter(ln[1:].split("//")[0].strip() for ln in diff if ln[:1] == sign and ln[:3] != sign * 3)
            for sign in "+-"}
    removed, added = code["-"] - code["+"], code["+"] - code["-"]
    assert set(removed) == {"hgemm_v1_mma(int M, int N, int K, const bf16* __restrict__ A, const bf16* __restrict__ B, bf16* __restrict__ C) {",
                            "using LA = RowMajor<BK>;", "using LB = RowMajor<BN>;"}, removed
    assert set(added) == {"hgemm_v2_swizzle(int M, int N, int K, const bf16* __restrict__ A, const bf16* __restrict__ B, bf16* __restrict__ C) {",
                          "using LA = Swizzled<BK>;", "using LB = Swizzled<BN>;"}, added


def test_wavefronts_per_mma_and_the_shared_memory_bound():
    """v1's warp tile (64 x 32): 16 A phases and 8 B phases feed 16 mmas per k-step; row-major they cost 4 and 8
    wavefronts (128 in all, 8 per mma), swizzled 1 each (1.5 per mma). A 64 x 64 warp tile: 1 per mma."""
    assert smem.wavefronts_per_mma(H.V1_TILE, "row-major") == 8.0
    assert smem.wavefronts_per_mma(H.V1_TILE, "swizzled") == 1.5
    assert smem.wavefronts_per_mma(H.V3_CONFIGS[1], "swizzled") == 1.0
    assert smem.smem_bound_tflops(H.V1_TILE, "swizzled", 132, 1_980_000) == pytest.approx(4096 / 1.5 * 132 * 1.98e9 / 1e12)


def test_resources_come_from_the_ptxas_report_of_the_instance_the_plan_picks():
    from utils.build import compile_source
    from utils.hardware import facts
    v = H.HGEMM["v3_pipeline"]
    r = ladders.resources(v, facts=facts("H200"))
    comp = compile_source(v.source)
    assert r["kernel"] == H.v3_name(H.V3_DEFAULT, True)
    assert r["registers"] == comp.report[comp.symbols[r["kernel"]]]["registers"]
    assert r["smem_kib"] == H.smem_bytes(H.V3_DEFAULT) / 1024 and r["blocks"] >= 1 and r["warps"] == H.threads_of(H.V3_DEFAULT) // 32 * r["blocks"]
    assert "v3_pipeline" in str(ladders.resources_table([v], facts=facts("H200")))


# --- the Hopper way: descriptors against TMA's layout -------------------------------------------------------

def test_wgmma_reads_every_element_where_tma_wrote_it():
    from kernels.hgemm import hopper as W
    assert W.disagreements(128, 128) == {"A": 0, "B": 0}
    assert W.disagreements(128, 256) == {"A": 0, "B": 0}


def test_the_descriptor_model_notices_a_wrong_stride(monkeypatch):
    from kernels.hgemm import hopper as W
    monkeypatch.setattr(W, "b_descriptor", lambda j: W.descriptor(2048 * j, W.ATOM, W.B_BOX))   # LBO, SBO swapped
    assert W.disagreements(128, 128)["B"] > 0
    monkeypatch.setattr(W, "a_descriptor", lambda m0, j: W.descriptor(m0 * 128 + 16 * j, 16, W.ATOM))
    assert W.disagreements(128, 128)["A"] > 0


DESC_PROGRAM = r"""
#include "cuda_emu.h"
#include "tma_sm90.cuh"
#include "hopper_common.cuh"
#include <cstdio>
int main() {
    const bf16* stage = reinterpret_cast<const bf16*>(emu_smem + 3 * 1024);
    for (int m0 = 0; m0 < 128; m0 += 64)
        for (int j = 0; j < 4; ++j) std::printf("A %d %d %llu\n", m0, j, a_desc(stage, m0, j));
    for (int j = 0; j < 4; ++j) std::printf("B %d %llu\n", j, b_desc(stage, j));
}
"""


def test_the_python_descriptors_are_the_kernels(tmp_path):
    """a_desc and b_desc of hopper_common.cuh, compiled with g++ against the emulated headers, on a stage 3 KiB
    into shared memory, against hopper.py's descriptors shifted by the same 3 KiB."""
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ is not installed")
    from kernels.hgemm import hopper as W
    (tmp_path / "desc.cpp").write_text(DESC_PROGRAM)
    emu = KERNELS.parent / "tests" / "emu"
    build = subprocess.run([gxx, "-std=c++20", "-w", "-pthread", f"-I{emu}", f"-I{KERNELS / 'hgemm'}",
                            f"-I{KERNELS / 'include'}", "desc.cpp", "-o", "desc"], cwd=tmp_path, capture_output=True, text=True)
    if build.returncode and "No such file" in build.stderr and "barrier" in build.stderr:
        pytest.skip("this g++ has no <barrier> (C++20)")
    assert build.returncode == 0, build.stderr[-2000:]
    got = subprocess.run([str(tmp_path / "desc")], capture_output=True, text=True, check=True).stdout.split("\n")
    shift = (3 * 1024) >> 4
    want = [f"A {m0} {j} {W.a_descriptor(m0, j) + shift}" for m0 in (0, 64) for j in range(4)]
    want += [f"B {j} {W.b_descriptor(j) + shift}" for j in range(4)]
    assert [ln for ln in got if ln] == want


def test_the_register_split_is_the_kernels_and_fits_the_register_file():
    import re
    text = (KERNELS / "hgemm" / "hopper_common.cuh").read_text()
    m = re.search(r"constexpr int PRODUCER_REGS = (\d+), CONSUMER_REGS = (\d+);", text)
    assert m and (int(m[1]), int(m[2])) == (H.PRODUCER_REGS, H.CONSUMER_REGS)
    assert 128 * H.PRODUCER_REGS + 256 * H.CONSUMER_REGS <= 65536
    assert H.PRODUCER_REGS % 8 == 0 and H.CONSUMER_REGS % 8 == 0 and 24 <= H.PRODUCER_REGS < H.CONSUMER_REGS <= 256


def test_against_prediction_names_where_a_ratio_lies():
    from kernels.hgemm.ladders import against_prediction
    assert [against_prediction(x, 0.97, 1.15) for x in (0.5, 0.97, 1.0, 1.15, 1.2)] == \
        ["低于预测", "落在预测之内", "落在预测之内", "落在预测之内", "高于预测"]


def test_the_release_cluster_variant_differs_from_v7_only_in_its_define():
    from kernels.hgemm import ladders
    from utils.build import compile_source
    v7, variant = H.HGEMM["v7_multicast"], ladders.release_cluster_variant()
    assert variant.source.defines == (ladders.RELEASE_CLUSTER_DEFINE,) and not v7.source.defines
    assert (variant.source.file, variant.source.name_expressions, variant.plan) == \
        (v7.source.file, v7.source.name_expressions, v7.plan)
    # the define reaches the header: the two builds' PTX differ exactly in the arrive's spelling
    ptx = [compile_source(s).ptx for s in (v7.source, variant.source)]
    assert "mbarrier.arrive.release.cluster.shared::cluster" not in ptx[0]
    assert "mbarrier.arrive.release.cluster.shared::cluster" in ptx[1]
