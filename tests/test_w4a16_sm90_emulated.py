"""The W4A16 wgmma GEMM (kernels/w4a16_sm90, chapter 13) run on the CPU through tests/emu: one OS thread per CUDA
thread, TMA landing at the issue or at the first wait that needs it, mbarrier phases, the register-sourced wgmma
taking A from the warpgroup's registers in the PTX fragment layout (and failing when a thread rewrites them
before the wgmma's wait), chapter 9's dequantisation helpers compiled as they are (int4.cuh's lop3 evaluated
from its truth table). A generated driver runs every instantiated config as the plan launches it, on M = 1, 16,
17, 33, 64, N with partial tiles, more groups than stages, and few CTAs, so that tiles are cut between CTAs and
summed from the workspace; y poisoned with NaN and a NaN guard after it, the workspace NaN-filled, against the
float64 reference on the bf16 dequantised weights. Mutants (kernel and prepack) must be caught.
tests/gpu/test_w4a16_sm90.py is the real thing. Skipped without g++ (C++20)."""
import functools
import shutil
import subprocess

import numpy as np
import pytest

from kernels import w4a16_sm90 as W
from kernels.quant import formats as F
from tests.fakes import FakeDeviceArray
from tests.build_helpers import emulated_source
from tests.test_hgemm_emulated import tensor_map
from utils.arrays import bf16
from utils.paths import KERNELS
from utils.version import Workspace

EMU = KERNELS.parent / "tests" / "emu"
SEED = 13
# (M, K, N, CTAs): tails in M (one token, 17, 33), N with partial tiles (64 and 96 under BN = 128, 160 under
# 256), more groups than stages (K = 1280: 10 groups), stream-K cuts (two tiles of three groups over four CTAs;
# five tiles of two groups over two CTAs: whole tiles on both sides of a cut one)
CASES = [(1, 128, 64, 1), (16, 384, 256, 4), (17, 256, 96, 3), (33, 384, 160, 5), (64, 512, 128, 3),
         (16, 1280, 64, 1), (32, 1024, 256, 3), (5, 256, 640, 2)]
TOL = 5e-3          # bf16 rounding of y is ~1e-3 relative (RMS); a wrong fragment, scale or zero point is O(1)

# The kernels' arrays at fake device addresses (FakeDeviceArray): the driver maps a TMA spec's address to its array
ARRAYS = ("x", "qw", "qz", "s", "y")
BASES = {name: (i + 1) << 36 for i, name in enumerate(ARRAYS)}


def problem_of(M, K, N, ctas):
    shapes = {"x": ((M, K), bf16()), "qw": ((W.ceil_div(N, W.SLICE), K // W.KC, 128, 4), np.int32),
              "qz": ((K // F.GROUP, N // 8), np.int32), "s": ((K // F.GROUP, N), bf16()), "y": ((M, N), bf16())}
    fakes = [FakeDeviceArray(*shapes[name], ptr=BASES[name]) for name in ARRAYS]
    return W.W4A16_WGMMA["v1_rs"].validate(*fakes, ctas=ctas)


def array_at(address: int) -> str:
    return next(name for name, base in BASES.items() if base <= address < base + (1 << 36))


def case_data(M, K, N, packer=W.pack_wgmma, seed=SEED):
    """x, the packed weights, GPTQ qzeros, scales (NumPy) of a random problem, and the reference."""
    q, z, s = F.random_int4_problem(K, N, xp=np, seed=seed)
    x = np.random.default_rng(seed).standard_normal((M, K)).astype(np.float32).astype(bf16())
    qzeros = F.pack_gptq(q, z)[1]
    ref = W.reference(x, W.pack_wgmma(q), qzeros, s)
    return {"x": x, "qw": packer(q), "qz": qzeros, "s": s}, ref


def config_runs():
    """(case, config): every case with its default config, and every instantiated config on the cases it fits."""
    runs = []
    for case in CASES:
        p = problem_of(*case)
        configs = W.W4A16_WGMMA["v1_rs"].all_configs(p)
        default = W.rs_default(p)
        chosen = [default] + [c for c in configs if c != default and c.tok == default.tok]
        runs += [(case, c) for c in chosen]
    covered = {c for _, c in runs}
    assert covered == set(W.RS_CONFIGS), f"configs no case runs: {set(W.RS_CONFIGS) - covered}"
    return runs


def launch_code(i, ln, config) -> str:
    """The body of run i: its arrays from the files, y and the workspace NaN-filled, the counters zero, the launch,
    y written back; the counters must be zero again afterwards (the last contributor resets them)."""
    body = [f'auto x = load<__nv_bfloat16>("r{i}_x.bin"); auto qw = load<int>("r{i}_qw.bin");',
            f'auto qz = load<int>("r{i}_qz.bin"); auto s = load<__nv_bfloat16>("r{i}_s.bin");',
            f"static_assert(w4a16_sm90::Stage<{config.tok}, {config.consumers * config.slices}>::BYTES == "
            f"{W.stage_bytes(config)}, \"stage_bytes disagrees with rs_common.cuh\");"]
    args = []
    for arg in ln.args:
        if isinstance(arg, np.integer):
            args.append(str(int(arg)))
        elif isinstance(arg, Workspace):
            n, name = int(np.prod(arg.shape)), ("ws" if arg.dtype == np.float32 else "counters")
            fill = "std::nanf(\"\")" if arg.fill is None else str(arg.fill)
            body.append(f"std::vector<{'float' if name == 'ws' else 'unsigned'}> {name}({n}, {fill});")
            args.append(f"{name}.data()")
        elif hasattr(arg, "box"):
            args.append(tensor_map(arg, f"{array_at(arg.address)}.data()"))
        else:
            args.append("y.data()")
    M, N = ln.args[-4], ln.args[-2]
    body.append(f"std::vector<__nv_bfloat16> y({int(M) * int(N)} + GUARD, NAN_BF16);")
    body.append(f"emu_launch({ln.kernel}, dim3e{{{ln.grid[0]}, 1, 1}}, dim3e{{{ln.block[0]}, 1, 1}}, {', '.join(args)});")
    body.append(f'save("r{i}_y.bin", y); counters_back_to_zero("run {i}", counters);')
    return "    {\n        " + "\n        ".join(body) + "\n    }\n"


DRIVER_HEAD = r"""
#include "cuda_emu.h"
#include "tma_sm90.cuh"
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>
#include "v01_rs.cu"

constexpr int GUARD = 64;                                  // NaN elements after y: none may be written
const __nv_bfloat16 NAN_BF16 = {0x7fc0};
static int fails = 0;

template <class T>
std::vector<T> load(const char* path) {
    std::ifstream f(path, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::vector<T> out(bytes.size() / sizeof(T));
    std::memcpy(out.data(), bytes.data(), bytes.size());
    return out;
}
template <class T>
void save(const char* path, const std::vector<T>& v) {
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}
void counters_back_to_zero(const char* what, const std::vector<unsigned>& c) {
    for (unsigned v : c)
        if (v) {
            std::printf("FAIL %s: a tile counter is %u after the launch, not 0\n", what, v);
            ++fails;
            return;
        }
}

int main(int argc, char** argv) {
    emu_tma_policy = argc > 1 && std::string(argv[1]) == "at-issue" ? EMU_TMA_AT_ISSUE : EMU_TMA_AT_WAIT;
"""
DRIVER_TAIL = r"""
    std::printf("%d failures\n", fails);
    return fails != 0;
}
"""

# int4.cuh's lop3 is one PTX instruction; here it is its truth table (tests/emu/cuda_emu.h emu_lop3)
LOP3_ASM = 'asm("lop3.b32 %0, %1, %2, %3, %4;" : "=r"(d) : "r"(a), "r"(b), "r"(c), "n"(LUT));'
LOP3_EMU = "d = emu_lop3<LUT>(a, b, c);"


def emulated_int4() -> str:
    text = (KERNELS / "include" / "int4.cuh").read_text()
    assert LOP3_ASM in text, "int4.cuh's lop3 changed: update LOP3_ASM"
    return text.replace(LOP3_ASM, LOP3_EMU)


def write_sources(tmp_path, sources=None):
    """The kernel's files with its dynamic shared memory pointed at the emulator's buffer, int4.cuh with lop3
    evaluated in C++, and any overrides (file name -> text) for the mutants."""
    for path in (KERNELS / "w4a16_sm90").glob("*.cu*"):
        (tmp_path / path.name).write_text(emulated_source(path))
    (tmp_path / "int4.cuh").write_text(emulated_int4())
    for name, text in (sources or {}).items():
        (tmp_path / name).write_text(text)


RUN_TIMEOUT_S = 900


def build_and_run(tmp_path, runs, sources=None, packer=W.pack_wgmma, policies=("at-wait", "at-issue"),
                  timeout_s=RUN_TIMEOUT_S):
    """Write the runs' inputs, build the driver and run it under each TMA policy. Returns (ok, report): ok when
    the driver exits 0 and every run's y matches the reference, finite on [M, N) and NaN in the guard."""
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ is not installed: the emulated kernels need a C++20 compiler")
    write_sources(tmp_path, sources)
    code, refs = [], []
    for i, (case, config) in enumerate(runs):
        M, K, N, ctas = case
        (ln,) = W.W4A16_WGMMA["v1_rs"].launches(problem_of(*case), config)
        data, ref = case_data(M, K, N, packer)
        for name, arr in data.items():
            np.ascontiguousarray(arr).tofile(tmp_path / f"r{i}_{name}.bin")
        refs.append((f"{config} on M, K, N = {M}, {K}, {N} over {ln.grid[0]} CTAs", ref))
        code.append(launch_code(i, ln, config))
    (tmp_path / "driver.cpp").write_text(DRIVER_HEAD + "".join(code) + DRIVER_TAIL)
    includes = [tmp_path, EMU, KERNELS / "include", KERNELS / "hgemm", KERNELS / "quant"]
    build = subprocess.run([gxx, "-std=c++20", "-O1", "-pthread", "-w", *(f"-I{d}" for d in includes), "driver.cpp",
                            "-o", "driver"], cwd=tmp_path, capture_output=True, text=True)
    if build.returncode and "barrier" in build.stderr and "No such file" in build.stderr:
        pytest.skip("this g++ has no <barrier> (C++20)")
    assert build.returncode == 0, build.stderr[-4000:]
    report = []
    for policy in policies:
        try:
            run = subprocess.run([str(tmp_path / "driver"), policy], cwd=tmp_path, capture_output=True, text=True,
                                 timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False, report + [f"{policy}: no result after {timeout_s} s (a deadlock?)"]
        report.append(f"{policy}: exit {run.returncode}: {(run.stdout + run.stderr)[-1500:]}")
        if run.returncode:
            return False, report
        for i, (what, ref) in enumerate(refs):
            bad = check_output(tmp_path / f"r{i}_y.bin", ref)
            if bad:
                report.append(f"{policy}: FAIL {what} (seed {SEED}): {bad}")
    return not any("FAIL" in line for line in report), report


def check_output(path, ref) -> str | None:
    """None if y (bf16, with its guard) matches ``ref``; else what is wrong."""
    M, N = ref.shape
    y = np.fromfile(path, dtype=bf16()).astype(np.float64)
    out, guard = y[:M * N].reshape(M, N), y[M * N:]
    if not np.isfinite(out).all():
        return f"{int((~np.isfinite(out)).sum())} of {M * N} outputs unwritten or NaN"
    if not np.isnan(guard).all():
        return "elements written past the end of y"
    rel = float(np.linalg.norm(out - ref) / (np.linalg.norm(ref) + 1e-30))
    return None if rel <= TOL else f"relative L2 error {rel:.3g} (tolerance {TOL})"


def test_every_config_on_the_cpu(tmp_path):
    ok, report = build_and_run(tmp_path, config_runs())
    assert ok, "\n".join(report)


# The emulation must catch what it exists for: each mutant breaks one thing a reader could get wrong.
# (file, edits, runs): the runs are a few that the mistake must show on.
MUTANT_RUNS = [((16, 384, 256, 4), W.RS_DEFAULT[16]), ((33, 384, 160, 5), W.RS_DEFAULT[64])]
MUTANTS = {
    # the A registers in mma.sync's B order (rows g and g + 8 of one k half swapped with the other k half)
    "A fragment in B order": ("rs_common.cuh", [("    a[1] = b[2];\n    a[2] = b[1];", "    a[1] = b[1];\n    a[2] = b[2];")]),
    # the producer loads the next group's scales with this group's weights
    "scales of the next group": ("rs_common.cuh", [("tma_load_2d(st + S::S_OFF, map_s, T * S::BN, g, &full[s]);",
                                                    "tma_load_2d(st + S::S_OFF, map_s, T * S::BN, (g + 1) % sp.G, &full[s]);")]),
    # row g + 8 dequantised with row g's zero point
    "zero point of the other row": ("rs_common.cuh", [("(sz[n / 8 + h] >>", "(sz[n / 8] >>")]),
    # one group more in flight than the A register ring holds: step j rewrites the registers step j - R still reads
    "A registers rewritten in flight": ("v01_rs.cu", [("wgmma_wait<R - 1>();", "wgmma_wait<R>();")]),
    # every contributor of a cut tile writes its partial at rank 0: the others' slots stay NaN
    "partials at one rank": ("v01_rs.cu", [("(size_t)((int)blockIdx.x - c_first) * S::BN * TOK", "(size_t)0")]),
}


def mutated(mutant: str) -> dict:
    """The mutant's file (emulated) with its edits applied: file name -> text."""
    file, edits = MUTANTS[mutant]
    text = emulated_source(KERNELS / "w4a16_sm90" / file)
    stale = [old for old, _ in edits if old not in text]
    assert not stale, f"the mutant {mutant!r} no longer applies: {stale} not in {file}"
    return {file: functools.reduce(lambda t, edit: t.replace(*edit), edits, text)}


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_the_emulation_catches(tmp_path, mutant):
    ok, report = build_and_run(tmp_path, MUTANT_RUNS, mutated(mutant), policies=("at-wait",), timeout_s=300)
    assert not ok, f"the mutant {mutant!r} passed:\n" + "\n".join(report)


def pack_without_regrouping(q):
    """A prepack that forgets pack_wgmma's regrouping: pack_mma's words in their own order, [N/16, K/64, 32, 4] read
    as [N/64, K/64, 128, 4]."""
    K, N = q.shape
    padded = np.zeros((K, 64 * W.ceil_div(N, 64)), np.uint8)
    padded[:, :N] = q
    return np.ascontiguousarray(F.pack_mma(padded).reshape(-1, K // 64, 128, 4))


def test_the_emulation_catches_a_prepack_in_the_wrong_order(tmp_path):
    ok, report = build_and_run(tmp_path, MUTANT_RUNS, packer=pack_without_regrouping, policies=("at-wait",),
                               timeout_s=300)
    assert not ok, "a prepack in pack_mma's order passed:\n" + "\n".join(report)
