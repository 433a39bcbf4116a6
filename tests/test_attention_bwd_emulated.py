"""The FlashAttention backward versions (kernels/attention_bwd, chapter 16) run on the CPU through tests/emu (one OS
thread per CUDA thread, real block barriers, cp.async landing at the wait): a generated driver runs every launch of
each version's plan, for every instantiated tile, on odd lengths (1, 17, 70, Sq != Sk), causal rows that see no key,
GQA 4:1 and MQA, D 64 and 128, with dq, dk, dv and every workspace NaN-poisoned (and guard elements past each
output that must stay NaN). Inputs and the float64 reference come from Python (reference_grads; out and lse from
the forward's reference); the driver writes the outputs back for the comparison here. tests/gpu/test_attention_bwd.py
is the real thing. Skipped without g++ (C++20)."""
from pathlib import Path

import numpy as np

from kernels import attention as A
from kernels import attention_bwd as AB
from tests.build_helpers import emu_launch_code, emulated_source, run_emulated_driver
from tests.fakes import ATTN_BWD_NAMES, attn_bwd_arrays
from utils.arrays import bf16
from utils.check import assert_close
from utils.paths import KERNELS
from utils.version import Workspace

SEED = 1601
GUARD = 8                      # NaN elements after each output: a write past the end shows up
# (B, Hq, Hkv, Sq, Sk, D, causal)
CASES = [(1, 1, 1, 1, 1, 64, False),           # one query, one key
         (1, 2, 1, 17, 17, 64, True),          # GQA 2:1, causal diagonal inside one tile
         (1, 4, 1, 70, 33, 128, True),         # MQA 4:1, Sq > Sk: the first 37 rows see no key
         (1, 8, 2, 33, 70, 64, False),         # GQA 4:1, Sq < Sk
         (1, 2, 2, 1, 70, 128, True),          # decode: one query sees every key
         (1, 1, 1, 139, 204, 64, True)]        # 2-4 key blocks, Sk - Sq = 65: a block's first query row is 63 or 127,
                                               # the last row of a tile (later blocks skip the tiles above)

DRIVER_HEAD = r"""
#include "cuda_emu.h"
#include "cuda_bf16.h"
#include <cmath>
#include <cstdio>
#include <vector>
// Float atomics (the emulator has the unsigned one): the dQ accumulation of v0.
inline float atomicAdd(float* p, float v) { return std::atomic_ref<float>(*p).fetch_add(v); }
%(includes)s

static int runs = 0, fails = 0;

template <class T>
std::vector<T> load(const char* path, size_t n, size_t guard) {
    std::vector<T> x(n + guard);
    std::memset(x.data(), 0xff, sizeof(T) * x.size());             // NaN in bf16 and fp32 alike
    if (FILE* f = std::fopen(path, "rb")) {
        if (std::fread(x.data(), sizeof(T), n, f) != n) ++fails;
        std::fclose(f);
    }
    return x;
}
template <class T>
void save(const char* path, const std::vector<T>& x) {
    FILE* f = std::fopen(path, "wb");
    std::fwrite(x.data(), sizeof(T), x.size(), f);
    std::fclose(f);
}

int main() {
"""

DRIVER_TAIL = r"""
    std::printf("%d runs, %d failures\n", runs, fails);
    return fails != 0;
}
"""


def make_inputs(B, Hq, Hkv, Sq, Sk, D, causal, seed):
    """bf16 q, k, v, dout (standard normal), out and lse from the forward's float64 reference."""
    rng = np.random.default_rng(seed)
    draw = lambda *s: rng.standard_normal(s).astype(np.float32).astype(bf16())     # noqa: E731
    q, k, v, dout = draw(B, Hq, Sq, D), draw(B, Hkv, Sk, D), draw(B, Hkv, Sk, D), draw(B, Hq, Sq, D)
    out, lse = A.reference(q, k, v, causal=causal)
    return {"q": q, "k": k, "v": v, "out": out.astype(bf16()), "lse": lse.astype(np.float32), "dout": dout}


def c_value(a, names: dict, workspaces: dict) -> str:
    """A launch argument as a C++ expression of the driver's buffers."""
    if isinstance(a, Workspace):
        return workspaces.setdefault(id(a), (f"ws{len(workspaces)}", a))[0] + ".data()"
    if id(a) in names:
        n = names[id(a)]
        return f"(const __nv_bfloat16*){n}.data()" if n in ("q", "k", "v", "out", "dout") else f"{n}.data()"
    if a is AB.NULL:                                           # a dense batch's missing offsets
        return "nullptr"
    if isinstance(a, np.floating):
        return f"{float(a)!r}f"
    if isinstance(a, np.int64):
        return f"{int(a)}LL"
    return str(int(a))


def run_block(tmp_path: Path, tag: str, launches, arrays, offsets=()) -> str:
    """One check: load inputs, poison outputs and workspaces, run the launches, write dq, dk, dv. ``offsets``: a
    varlen batch's (cu_q, cu_k) as the plan holds them."""
    names = {id(x): n for n, x in zip(ATTN_BWD_NAMES, arrays)}
    names.update({id(c): n for n, c in zip(("cu_q", "cu_k"), offsets)})
    workspaces: dict = {}
    calls = [emu_launch_code(ln, ", ".join(c_value(a, names, workspaces) for a in ln.args)) for ln in launches]
    lines = [f"{{ // {tag}"]
    lines += [f"    std::vector<int> {n}{{{', '.join(map(str, np.asarray(c).tolist()))}}};"
              for n, c in zip(("cu_q", "cu_k"), offsets)]
    for n, x in zip(ATTN_BWD_NAMES, arrays):
        t = "float" if n == "lse" else "__nv_bfloat16"
        lines.append(f'    auto {n} = load<{t}>("{tmp_path}/{tag}_{n}.bin", {x.size}, {GUARD});')
    for name, ws in workspaces.values():
        lines.append(f'    auto {name} = load<float>("", {int(np.prod(ws.shape))}, 0);')
    lines += [f"    {c};" for c in calls]
    lines += [f'    save("{tmp_path}/{tag}_{n}.out", {n});' for n in ("dq", "dk", "dv")]
    lines.append("    ++runs; }")
    return "\n".join(lines)


def build_checks(tmp_path: Path):
    """Write every case's inputs; return (driver blocks, [(tag, what, case, inputs)])."""
    blocks, expected = [], []
    for ci, (B, Hq, Hkv, Sq, Sk, D, causal) in enumerate(CASES):
        inputs = make_inputs(B, Hq, Hkv, Sq, Sk, D, causal, SEED + ci)
        for v in AB.ATTN_BWD.values():
            arrays = attn_bwd_arrays((B, Hq, Sq, D), (B, Hkv, Sk, D), (B, Hq, Sq))
            p = v.validate(*arrays, causal=causal)
            for config in v.all_configs(p):
                tag = f"c{ci}_{v.label}_{config.bn}x{config.bm}"
                for n, x in inputs.items():
                    (tmp_path / f"{tag}_{n}.bin").write_bytes(np.ascontiguousarray(x).tobytes())
                blocks.append(run_block(tmp_path, tag, v.launches(p, config), arrays))
                expected.append((tag, f"{v.label} {config} case {CASES[ci]}", CASES[ci], inputs))
    return blocks, expected


def assert_rows_close(got, ref, what: str, tol: float = 5e-2) -> None:
    """Each row (one query's dq, one key's dk or dv) within ``tol`` relative L2 of its own reference, the norm floored
    at 1e-3 of the largest row: a (query, key) pair lost at a tile edge hides in the whole tensor's error, not here."""
    g, r = got.astype(np.float64).reshape(-1, ref.shape[-1]), ref.reshape(-1, ref.shape[-1])
    norms = np.linalg.norm(r, axis=1)
    err = np.linalg.norm(g - r, axis=1) / np.maximum(norms, 1e-3 * norms.max() + 1e-30)
    worst = int(np.argmax(err))
    assert err[worst] <= tol, f"{what}: row {worst} off by {err[worst]:.3e} relative L2 (tolerance {tol:.0e})"


def test_every_version_on_the_cpu(tmp_path):
    blocks, expected = build_checks(tmp_path)
    run_driver(tmp_path, blocks)
    failures = []
    for tag, what, (B, Hq, Hkv, Sq, Sk, D, causal), inputs in expected:
        want = AB.reference_grads(inputs["q"], inputs["k"], inputs["v"], inputs["dout"], causal)
        failures += compare_outputs(tmp_path, tag, what, want)
    assert not failures, f"{len(failures)} failures:\n" + "\n".join(failures)


def run_driver(tmp_path: Path, blocks) -> None:
    """Build and run the driver over the three backward sources (dynamic shared memory -> the emulator's buffer)."""
    files = [AB.PREP_SOURCE.file, AB.V0_SOURCE.file, AB.V1_SOURCE.file]
    for f in files:
        (tmp_path / Path(f).name).write_text(emulated_source(KERNELS / f))
    run_emulated_driver(tmp_path, DRIVER_HEAD, blocks, DRIVER_TAIL, files,
                        [KERNELS / "attention_bwd", KERNELS / "attention", KERNELS / "include"])


def compare_outputs(tmp_path: Path, tag: str, what: str, want) -> list[str]:
    """The driver's dq, dk, dv of one check against the float64 ``want``: nothing past the end, the whole tensor
    and every row within tolerance. Returns the failures' messages."""
    failures = []
    for n, ref in zip(("dq", "dk", "dv"), want):
        got = np.fromfile(tmp_path / f"{tag}_{n}.out", dtype=bf16())
        body, guard = got[:ref.size].reshape(ref.shape), got[ref.size:].astype(np.float32)
        try:
            assert np.isnan(guard).all(), f"{what}: {n} written past its end"
            assert_close(body, ref, dtype="bfloat16", name=f"{what}: {n}")
            assert_rows_close(body, ref, f"{what}: {n}")
        except AssertionError as e:
            failures.append(str(e))
    return failures


# (cu_q, cu_k, Hq, Hkv, D, causal): GQA, causal: one query against 30 keys, a sequence without queries (its keys get
# dk = dv = 0), 149 queries against 150 keys (past a row tile), 13 queries against 5 keys (the first 8 see none);
# full: 70 x 40, decode-like 5 x 130 (past a key tile), 5 queries and no keys (dq = 0)
VARLEN_CASES = [([0, 1, 1, 150, 163], [0, 30, 31, 181, 186], 2, 1, 64, True),
                ([0, 70, 75, 80], [0, 40, 170, 170], 2, 2, 128, False)]


def varlen_inputs(cq, ck, Hq, Hkv, D, causal, seed):
    rng = np.random.default_rng(seed)
    draw = lambda *s: rng.standard_normal(s).astype(np.float32).astype(bf16())     # noqa: E731
    Tq, Tk = cq[-1], ck[-1]
    q, k, v, dout = draw(Tq, Hq, D), draw(Tk, Hkv, D), draw(Tk, Hkv, D), draw(Tq, Hq, D)
    out, lse = A.varlen_reference(q, k, v, np.array(cq, np.int32), np.array(ck, np.int32), causal=causal)
    return {"q": q, "k": k, "v": v, "out": out.astype(bf16()), "lse": lse.astype(np.float32), "dout": dout}


def test_varlen_on_the_cpu(tmp_path):
    """Both versions' varlen entries (default tile) on packed batches: each sequence's gradients as the float64
    reference of that sequence alone, nothing written past dq, dk, dv."""
    blocks, expected = [], []
    for ci, (cq, ck, Hq, Hkv, D, causal) in enumerate(VARLEN_CASES):
        inputs = varlen_inputs(cq, ck, Hq, Hkv, D, causal, SEED + 100 + ci)
        Tq, Tk = cq[-1], ck[-1]
        for v in AB.ATTN_BWD_VARLEN.values():
            arrays = attn_bwd_arrays((Tq, Hq, D), (Tk, Hkv, D), (Hq, Tq))
            p = v.validate(*arrays, np.array(cq, np.int32), np.array(ck, np.int32), causal=causal)
            tag = f"varlen{ci}_{v.label}"
            for n, x in inputs.items():
                (tmp_path / f"{tag}_{n}.bin").write_bytes(np.ascontiguousarray(x).tobytes())
            blocks.append(run_block(tmp_path, tag, v.launches(p, v.default(p)), arrays, (p.fwd.cu_q, p.fwd.cu_k)))
            expected.append((tag, f"varlen {v.label} {cq} {ck} Hq{Hq} Hkv{Hkv} d{D} causal={causal}", cq, ck,
                             causal, inputs))
    run_driver(tmp_path, blocks)
    failures = []
    for tag, what, cq, ck, causal, x in expected:
        want = AB.varlen_reference_grads(x["q"], x["k"], x["v"], x["dout"], np.array(cq, np.int32),
                                         np.array(ck, np.int32), causal)
        failures += compare_outputs(tmp_path, tag, what, want)
    assert not failures, f"{len(failures)} failures:\n" + "\n".join(failures)
