"""Every hgemm version's kernels (chapter 12), run on the CPU: tests/emu turns the .cu files into C++ (one OS
thread per CUDA thread, real block and warp barriers; mma.sync, ldmatrix and WMMA done by the warp's threads
from each lane's registers as the PTX ISA lays them out; cp.async landing only at its wait). A generated
driver launches every instantiated config as its version's plan says, on tails, the 16-byte and element-wise
paths and misaligned pointers, with C poisoned (bf16 NaN), NaN past the ends of A and B and a poisoned guard
past C, against a float64 reference of the bf16 inputs; where a Hopper plan copies A and B into padded
workspaces (pack.cu), those start NaN-filled. tests/gpu/test_hgemm.py is the real thing. Skipped
without g++ (C++20)."""
import shutil
import subprocess

import numpy as np
import pytest

from kernels import hgemm as H
from tests.build_helpers import emulated_source
from tests.test_hgemm_host import arrays
from utils.version import Workspace
from utils.paths import KERNELS

EMU = KERNELS.parent / "tests" / "emu"
# (M, N, K), offsets of A, B, C in elements past a 16-byte boundary
CASES = [((1, 1, 1), (0, 0, 0)),
         ((33, 65, 7), (0, 0, 0)),           # K below one k16 step, N % 8 != 0: element-wise path
         ((37, 199, 183), (0, 0, 0)),
         ((129, 264, 72), (0, 0, 0)),        # 16-byte path: tails in M, N (one n8 past 256) and K (8 past 64)
         ((129, 264, 72), (1, 1, 1)),        # the same shape with misaligned pointers: element-wise path
         ((200, 136, 40), (0, 0, 2)),        # 16-byte path with C only 4-byte aligned
         ((70, 133, 48), (0, 0, 0)),         # N odd
         ((256, 256, 96), (0, 0, 0)),        # whole tiles for every config
         ((256, 512, 320), (0, 0, 0)),       # more k-tiles than stages, more tiles than persistent blocks
         ((300, 264, 72), (0, 0, 0))]        # an odd number of row tiles: v7's last pair has a tile past M

DRIVER_HEAD = r"""
#include "cuda_emu.h"
#include "tma_sm90.cuh"
#include "cluster_sm90.cuh"
#include <cmath>
#include <cstdint>
#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>
%(includes)s

static int runs = 0, fails = 0;

template <class Launch>
void check(const char* what, int M, int N, int K, int oa, int ob, int oc, Launch launch) {
    std::mt19937 gen(M * 7919 + N * 31 + K + oa + 2 * ob + 3 * oc);
    std::normal_distribution<float> d;
    const __nv_bfloat16 nan = {0x7fc0};
    // NaN past the ends of A and B (a row and more): a kernel that reads past them puts NaN into C
    std::vector<__nv_bfloat16> A(M * K + K + 64, nan), B(K * N + N + 64, nan), Cb(M * N + 16 + 64, nan);
    auto at = [](std::vector<__nv_bfloat16>& v, int off) {
        return (__nv_bfloat16*)(((uintptr_t)v.data() + 15) & ~(uintptr_t)15) + off; };
    __nv_bfloat16 *a = at(A, oa), *b = at(B, ob), *c = at(Cb, oc);
    for (int i = 0; i < M * K; ++i) a[i] = __float2bfloat16(d(gen));
    for (int i = 0; i < K * N; ++i) b[i] = __float2bfloat16(d(gen));
    launch(a, b, c);
    double num = 0, den = 0;
    int bad = 0;
    for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) {
            double r = 0;
            for (int k = 0; k < K; ++k) r += (double)__bfloat162float(a[i * K + k]) * __bfloat162float(b[k * N + j]);
            const double x = __bfloat162float(c[i * N + j]);
            if (!std::isfinite(x)) ++bad;
            num += (x - r) * (x - r);
            den += r * r;
        }
    for (int i = M * N; i < M * N + 16; ++i) bad += !std::isnan(__bfloat162float(c[i]));
    ++runs;
    const double rel = std::sqrt(num / (den + 1e-30));
    if (bad || rel > %(tol)s) {
        ++fails;
        std::printf("FAIL %%s: relative L2 error %%g, %%d elements unwritten or written past C\n", what, rel, bad);
    }
}

int main(int argc, char** argv) {
    // when TMA's bytes land: at the issue or at the first wait that needs them (tests/emu/tma_sm90.cuh)
    emu_tma_policy = argc > 1 && std::string(argv[1]) == "at-issue" ? EMU_TMA_AT_ISSUE : EMU_TMA_AT_WAIT;
"""

DRIVER_TAIL = r"""
    std::printf("%d runs, %d failures\n", runs, fails);
    return fails != 0;
}
"""
TOL = 5e-3   # bf16 rounding of C alone is about 1.1e-3 relative (RMS); a wrong fragment is O(1)

def problem_at(shape, offs):
    return arrays(*shape, offs=offs)


PERSISTENT_BLOCKS = 3    # a persistent launch gets this many blocks here, so each walks several tiles


def tensor_map(spec, pointer: str) -> str:
    """The emulated TmaDescriptor (tests/emu/tma_sm90.cuh) of a plan's TiledSpec, over the driver's array."""
    rows, cols = spec.shape
    box_rows, box_cols = spec.box
    return (f"TmaDescriptor{{(const unsigned char*){pointer}, {cols}, {rows}, {spec.strides[0]}, {box_cols}, "
            f"{box_rows}, {spec.dtype.itemsize}, {spec.swizzle}}}")


BASES = {1 << 36: "a", 2 << 36: "b", 3 << 36: "c"}     # the fake pointers of test_hgemm_host.arrays, by the array they stand for


def array_of(address: int) -> str:
    return next(name for base, name in BASES.items() if base <= address < base + (1 << 36))


def launch_args(ln, workspaces: dict) -> str:
    """The plan's arguments in C++: integers, TMA maps (v4 on: the maps of A and B and the pointer to C; v8: the
    three maps), each map over the driver's array it was made for, the driver's arrays by name, and the
    fallback's workspaces by the names :func:`launch_lines` gives them."""
    out = []
    for arg in ln.args:
        if isinstance(arg, np.integer):
            out.append(str(int(arg)))
        elif isinstance(arg, Workspace):
            out.append(workspaces[id(arg)])
        elif hasattr(arg, "box"):
            out.append(tensor_map(arg, array_of(arg.address)))
        else:
            name = array_of(arg.__cuda_array_interface__["data"][0])
            out.append(name if name == "c" else f"(const __nv_bfloat16*){name}")
    return ", ".join(out)


def launch_lines(launches) -> str:
    """The body of a case's lambda: the plan's workspaces (NaN-filled, as a GPU's are uninitialised) and its
    launches in order, a persistent grid lowered to a few blocks (clusters: a few clusters)."""
    workspaces, body = {}, []
    for ln in launches:
        for arg in ln.args:
            if isinstance(arg, Workspace) and id(arg) not in workspaces:
                name = workspaces[id(arg)] = f"w{len(workspaces)}"
                n = int(np.prod(arg.shape))
                body.append(f"std::vector<uint4> {name}_v(({n} + 7) / 8); __nv_bfloat16* {name} = "
                            f"(__nv_bfloat16*){name}_v.data(); std::fill_n({name}, {n}, __nv_bfloat16{{0x7fc0}});")
        grid = ln.grid
        if ln.persistent:
            grid = (min(ln.grid[0], PERSISTENT_BLOCKS * ln.cluster), 1, 1)
        launcher = "emu_launch" if ln.cluster == 1 else f"emu_launch_cluster<{ln.cluster}>"
        body.append(f"{launcher}({ln.kernel}, dim3e{{{', '.join(map(str, grid))}}}, "
                    f"dim3e{{{', '.join(map(str, ln.block))}}}, {launch_args(ln, workspaces)});")
    return " ".join(body)


def driver(versions=None) -> tuple[str, int]:
    lines, files = [], []
    for v in versions or H.HGEMM.values():
        files.append(v.source.file.split("/")[-1])
        for config in v.all_configs():
            for shape, offs in CASES:
                p = v.validate(*problem_at(shape, offs))
                launches = v.launches(p, config)
                files += [ln.source.file.split("/")[-1] for ln in launches if ln.source is not None]
                kernels = " + ".join(ln.kernel for ln in launches)
                what = f"{v.label} {kernels} {'x'.join(map(str, shape))} offsets {offs}"
                M, N, K = shape
                lines.append(
                    f'    check("{what}", {M}, {N}, {K}, {offs[0]}, {offs[1]}, {offs[2]}, '
                    f'[&](__nv_bfloat16* a, __nv_bfloat16* b, __nv_bfloat16* c) {{ {launch_lines(launches)} }});')
    includes = "\n".join(f'#include "{f}"' for f in dict.fromkeys(files))
    return DRIVER_HEAD % {"includes": includes, "tol": TOL} + "\n".join(lines) + DRIVER_TAIL, len(lines)


TMA_POLICIES = ("at-wait", "at-issue")


RUN_TIMEOUT_S = 600     # the whole driver; a pipeline that deadlocks ends here


def build_and_run(tmp_path, versions=None, sources=None, policy: str = "at-wait", timeout_s: int = RUN_TIMEOUT_S,
                  folders=("hgemm",)):
    """Compile the driver against the emulated kernels (``sources``: file name -> text overrides) and run it with
    TMA's bytes landing ``policy`` ("at-wait" or "at-issue"). Returns (returncode, stdout + stderr, checks); a
    run that does not finish in ``timeout_s`` (a deadlocked pipeline) returns returncode None. ``folders``:
    the kernels/ folders whose .cu and .cuh files go beside the driver."""
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ is not installed: the emulated kernels need a C++20 compiler")
    for path in (p for folder in folders for p in (KERNELS / folder).glob("*.cu*")):   # beside the driver
        (tmp_path / path.name).write_text((sources or {}).get(path.name) or emulated_source(path))
    src, n = driver(versions)
    (tmp_path / "driver.cpp").write_text(src)
    # tests/emu first: its mma_sm80.cuh, ldmatrix_sm80.cuh, mma.h and cuda_bf16.h stand in for the real ones
    build = subprocess.run([gxx, "-std=c++20", "-O1", "-pthread", "-w", f"-I{EMU}", f"-I{KERNELS / 'include'}", "driver.cpp", "-o", "driver"],
                           cwd=tmp_path, capture_output=True, text=True)
    if build.returncode and "barrier" in build.stderr and "No such file" in build.stderr:
        pytest.skip("this g++ has no <barrier> (C++20)")
    assert build.returncode == 0, build.stderr[-3000:]
    try:
        run = subprocess.run([str(tmp_path / "driver"), policy], capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as e:
        return None, f"no result after {timeout_s} s (a deadlock?)\n{e.stdout or ''}", n
    return run.returncode, run.stdout + run.stderr, n


@pytest.mark.parametrize("policy", TMA_POLICIES)
def test_every_version_on_the_cpu(tmp_path, policy):
    """v0-v3 do not use TMA: the second policy runs only the Hopper versions again."""
    versions = None if policy == "at-wait" else [v for v in H.HGEMM.values() if v.number >= 4]
    rc, out, n = build_and_run(tmp_path, versions, policy=policy)
    assert rc == 0 and f"{n} runs, 0 failures" in out, out[-3000:]


# The emulation must catch the mistakes it exists for. Each mutant breaks one thing a reader could get wrong;
# the driver must report failures (or crash) on it.
MUTANTS = {
    # B fragments of the two n8 tiles swapped between ldmatrix.x4.trans's matrices 1 and 2
    "ldmatrix.trans order": ("hgemm_common.cuh", "v1_mma",
                             [("b[2 * nj][1] = r[1];", "b[2 * nj][1] = r[2];"),
                              ("b[2 * nj + 1][0] = r[2];", "b[2 * nj + 1][0] = r[1];")]),
    # the pipeline reads a stage one group before its copies have landed
    "cp.async wait one short": ("v03_pipeline.cu", "v3_pipeline",
                                [("cp_async_wait<STAGES - 2>();", "cp_async_wait<STAGES - 1>();")]),
    # the element-wise loads read one column past the end of each row
    "tail test off by one": ("hgemm_common.cuh", "v2_swizzle",
                             [("const unsigned hi = gc + 2 * j + 1 < cols ?", "const unsigned hi = gc + 2 * j + 1 <= cols ?")]),
    # the element-wise pipeline stores the registers of tile k + STAGES - 1 into the slot tile k reads
    "register stage into the live slot": ("v03_pipeline.cu", "v3_pipeline",
                                          [("put_tile<BM, BK, NT, LA>(slot_a(refill), ra);",
                                            "put_tile<BM, BK, NT, LA>(slot_a(slot), ra);")]),
    # wgmma told that B is K-major while TMA wrote it N-major
    "wgmma B as K-major": ("hopper_common.cuh", "v4_wgmma",
                           [("wgmma_m64n128k16<1>", "wgmma_m64n128k16<0>")]),
    # A's descriptor advanced by 16 bytes per k16 step instead of 32
    "A descriptor k-step": ("hopper_common.cuh", "v4_wgmma", [("m0 * 128 + 32 * j", "m0 * 128 + 16 * j")]),
    # B's LBO (box to box along N) and SBO (8 k rows to the next 8) swapped
    "B LBO and SBO swapped": ("hopper_common.cuh", "v4_wgmma",
                              [("2048 * j, B_BOX_BYTES, SW128_ATOM", "2048 * j, SW128_ATOM, B_BOX_BYTES")]),
    # the persistent consumers count the full barrier's phase per tile instead of per stage used
    "stage parity restarted per tile": ("v06_persistent.cu", "v6_persistent",
                                        [("mbarrier_wait(&full[s], (it / STAGES) & 1);",
                                          "mbarrier_wait(&full[s], (kt / STAGES) & 1);")]),
    # each CTA of a v7 cluster multicasts the other half of B's boxes into the wrong places
    "multicast boxes swapped": ("v07_multicast.cu", "v7_multicast",
                                [("b_stage(s) + b * 64 * 64, &map_b", "b_stage(s) + (b ^ 1) * 64 * 64, &map_b")]),
    # v8's staging tile written row-major while the TMA map of C reads it 128-byte swizzled
    "staging tile unswizzled": ("hopper_common.cuh", "v8_tma_store",
                                [("*reinterpret_cast<__nv_bfloat162*>(base + (byte ^ (((byte >> 7) & 7) << 4))) =",
                                  "*reinterpret_cast<__nv_bfloat162*>(base + byte) =")]),
    # the fallback's copy of B leaves the padding rows below K as they were (NaN here, garbage on a GPU)
    "pack without the zero rows": ("pack.cu", "v4_wgmma",
                                   [("const unsigned lo = r < rows && c < cols ?", "const unsigned lo = c < cols ?"),
                                    ("const unsigned hi = r < rows && c + 1 < cols ?", "const unsigned hi = c + 1 < cols ?")]),
    # the copy of C back out writes the padding columns too
    "unpack past N": ("pack.cu", "v4_wgmma", [("if (c + 1 < cols) dst[", "if (c + 1 < src_cols) dst[")]),
}
MUTANT_TIMEOUT_S = 120


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_the_emulation_catches(tmp_path, mutant):
    file, label, edits = MUTANTS[mutant]
    text = emulated_source(KERNELS / "hgemm" / file)
    for old, new in edits:
        assert old in text, f"the mutant {mutant!r} no longer applies: {old!r} is not in {file}"
        text = text.replace(old, new)
    rc, out, n = build_and_run(tmp_path, [H.HGEMM[label]], {file: text}, timeout_s=MUTANT_TIMEOUT_S)
    assert rc != 0 and f"{n} runs, 0 failures" not in out, f"the mutant {mutant!r} passed:\n{out[-2000:]}"
