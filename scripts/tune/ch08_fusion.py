"""Chapter 8 tuning batch: every version and every config of the four fused ops (kernels.fusion.REGISTRIES:
bias_gelu v1 erff, v2 polynomial GELU, v3 2-D layout with 2/4/8 rows per thread and v1's erff in that layout;
swiglu; add_rmsnorm; rope v1 and v2 one block per token) on the chapter's bar shapes vs torch eager and
torch.compile, bandwidth on the fused kernel's minimal bytes. Run from the repo root:
python scripts/tune/ch08_fusion.py [--no-compile]. Writes $OUT/tune_ch08_fusion.json when OUT is set."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import cupy
import numpy as np
import torch

from kernels import fusion as F
from utils.bench import bench
from utils.check import assert_close, poison
from utils.hardware import copy_gbps
from utils.ladder import peer_output

T_TOK, HID, FFN, HEADS, HDIM = 8192, 4096, 11008, 32, 128
SHAPES = {"bias_gelu": (T_TOK, HID), "swiglu": (T_TOK, FFN), "add_rmsnorm": (T_TOK, HID),
          "rope": (T_TOK, HEADS, HEADS, HDIM)}
SEED = 8
T0 = time.perf_counter()
ROWS = []


def ours_names(op):
    reg = F.REGISTRIES[op]
    return {lab if cfg is None else f"{lab}[{cfg.rows},{cfg.gelu}]" for lab in reg
            for cfg in (reg[lab].all_configs() or (None,))}


def measure(op, cand, fn, check, nbytes, copy):
    """Check first (print FAIL, never raise), then time; one row."""
    try:
        fn()
        cupy.cuda.get_current_stream().synchronize()
        torch.cuda.synchronize()
        check()
    except Exception as exc:  # noqa: BLE001
        print(f"FAIL {op} {cand}: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
        return
    try:
        t = bench(fn, target_ms=80, max_reps=100)
    except Exception:  # noqa: BLE001
        print(f"FAIL timing {op} {cand}:\n{traceback.format_exc()}")
        return
    gbs = nbytes / (t.ms * 1e-3) / 1e9
    ROWS.append({"op": op, "candidate": cand, "shape": list(SHAPES[op]), "dtype": "bfloat16", "us": t.ms * 1e3,
                 "GB/s": gbs, "of_copy": gbs / copy, "is_peer": cand not in ours_names(op)})


def run_op(op, copy, use_compile):
    shape = SHAPES[op]
    case = F.make_case(op, shape, F.BF16, np.random.default_rng(SEED))
    ref = F.reference_case(op, case)
    refs = ref if isinstance(ref, tuple) else (ref,)
    nbytes = F.fused_bytes(op, shape)

    def check_outputs(outs, name):
        for i, (o, r) in enumerate(zip(outs, refs)):
            assert_close(o, r, dtype="bfloat16", name=f"{op} {name} output {i}")

    for name, factory in F.peers(op).items():
        if name == "torch.compile" and not use_compile:
            continue
        fn = factory(case)
        box = {}

        def run(fn=fn, box=box):
            box["out"] = fn()

        def check(box=box, name=name):
            out = peer_output(box["out"])          # torch tensors viewed as CuPy, after timing
            check_outputs(out if isinstance(out, tuple) else (out,), name)
        measure(op, name, run, check, nbytes, copy)

    outs = [case.args[i] for i in case.outputs]
    for label, v in F.REGISTRIES[op].items():
        for cfg in v.all_configs() or (None,):
            cand = label if cfg is None else f"{label}[{cfg.rows},{cfg.gelu}]"
            for o in outs:
                poison(o)
            run = v.bind(*case.args, config=cfg)
            measure(op, cand, run, lambda cand=cand: check_outputs(outs, cand), nbytes, copy)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-compile", action="store_true")
    args = ap.parse_args()
    use_compile = not args.no_compile
    copy = copy_gbps(target_ms=100)
    print(f"copy ceiling {copy:.0f} GB/s  ({time.perf_counter() - T0:.1f} s)")

    for op in F.REGISTRIES:
        try:
            run_op(op, copy, use_compile)
        except Exception:  # noqa: BLE001
            print(f"FAIL {op}:\n{traceback.format_exc()}")
        cupy.get_default_memory_pool().free_all_blocks()
        torch.cuda.empty_cache()
        print(f"{op} done ({time.perf_counter() - T0:.1f} s)")

    by = {}
    for row in ROWS:
        by.setdefault(row["op"], {})[row["candidate"]] = row
    print(f"\n{'op':<12} {'candidate':<22} {'us':>8} {'GB/s':>7} {'copy':>6} {'vs eager':>8} {'/pred':>6} "
          f"{'vs compile':>10}")
    for op, rows in by.items():
        pred = F.predicted_speedup(F.LEDGERS[op](*SHAPES[op]))
        eager, comp = rows.get("torch.eager"), rows.get("torch.compile")
        for cand, row in rows.items():
            sp = eager["us"] / row["us"] if eager else float("nan")
            vc = comp["us"] / row["us"] if comp else float("nan")
            row.update(speedup_over_eager=sp, predicted_speedup=pred, measured_over_predicted=sp / pred, vs_compile=vc)
            print(f"{op:<12} {cand:<22} {row['us']:8.1f} {row['GB/s']:7.0f} {row['of_copy']:6.1%} {sp:7.2f}x "
                  f"{sp / pred:6.2f} {vc:9.2f}x")
    print()
    for op, rows in by.items():
        ours = {c: r for c, r in rows.items() if not r["is_peer"]}
        if not ours:
            print(f"{op}: no candidate passed")
            continue
        best = min(ours.values(), key=lambda r: r["us"])
        bar = best["of_copy"] >= 0.8 and best["measured_over_predicted"] >= 0.9
        goal = bar and best["of_copy"] >= 0.9 and best["vs_compile"] >= 1.0
        print(f"BEST {op}: {best['candidate']} {best['us']:.1f} us, {best['of_copy']:.1%} of copy, "
              f"{best['measured_over_predicted']:.2f} of predicted speedup, {best['vs_compile']:.2f}x torch.compile"
              f" -> {'goal met' if goal else 'bar met' if bar else 'BELOW the bar'}")
    bg = by.get("bias_gelu", {})
    v3 = f"v3_rows[{F.BIAS_GELU_V3.rows},{F.BIAS_GELU_V3.gelu}]"
    if all(k in bg for k in ("v1_vec8", "v2_poly", "v3_rows[4,erf]", v3)):
        t1, t2, te, t3 = (bg[k]["us"] for k in ("v1_vec8", "v2_poly", "v3_rows[4,erf]", v3))
        print(f"bias_gelu v1 -> {v3}: {t1 - t3:.1f} us saved = layout (v1 -> v3_rows[4,erf]) {t1 - te:.1f} us"
              f" + GELU formula in the 2-D layout {te - t3:.1f} us; formula in the 1-D layout (v1 -> v2) {t1 - t2:.1f} us")
        rows_best = min((k for k in bg if k.startswith("v3_rows") and k.endswith("poly]")), key=lambda k: bg[k]["us"])
        print(f"bias_gelu rows per thread: best {rows_best} (BIAS_GELU_V3 = {F.BIAS_GELU_V3})")
    print(f"total {time.perf_counter() - T0:.1f} s")
    if os.environ.get("OUT"):
        path = Path(os.environ["OUT"]) / "tune_ch08_fusion.json"
        path.write_text(json.dumps({"copy_GBps": copy, "rows": ROWS}, indent=1))
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
