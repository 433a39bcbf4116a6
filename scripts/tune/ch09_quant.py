"""Chapter 9 tuning batch: every version of the W4A16 GEMV (batch 1) and the W4A16 GEMM (M = 16, 32, 64) at
K = N = 8192, in every instantiated config and a few K splits (or CTA counts for GEMM v3), against cuBLAS bf16
on the same weights dequantized to bf16. The candidates come from the registries (kernels.quant.GEMV, GEMM):
a new version or config is tuned without editing this script.
Each row prints the kernel's registers and resident CTAs per SM (the driver's occupancy calculator).
Run from the repo root: python scripts/tune/ch09_quant.py [--only gemv|gemm]. Writes $OUT/tune_ch09_quant.json
when OUT is set. One row per (candidate, shape); a BEST line per shape. A failing candidate prints its
traceback and the batch goes on."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import cupy  # noqa: E402

from kernels import quant as Q  # noqa: E402
from utils.bench import bench  # noqa: E402
from utils.check import assert_close, poison  # noqa: E402
from utils.hardware import copy_gbps, facts  # noqa: E402
from utils.version import driver_blocks_per_sm  # noqa: E402

K = N = 8192
SEED = 9
T0 = time.perf_counter()
BARS = {"gemv": (3.0, 4.5), "gemm16": (2.5, 4.0)}


def weights():
    q, z, s = Q.random_int4_problem(K, N, seed=SEED)
    qweight, qzeros = Q.pack_gptq(q, z)
    Wb = Q.dequantize_int4(q, s, z).astype(Q.BF16)
    return dict(qweight=qweight, qzeros=qzeros, qmma=Q.pack_mma(q), qtiled=Q.pack_gemv_tiled(qweight), s=s,
                Wb=Wb, Wf=Wb.astype(cupy.float32))


def residency(v, problem, config):
    """(registers, resident CTAs per SM, CTAs in the grid) of a version's first launch, from the driver."""
    ln = v.launches(problem, config)[0]
    fn = (ln.source or v.source).launchable(ln.kernel, ln.cluster, ln.smem)
    return int(fn.num_regs), driver_blocks_per_sm(fn, ln.threads, ln.smem), ln.blocks


def split_choices(v, problem, config, knob):
    """The planned K split (or CTA count) of ``v`` and its neighbours: half, double."""
    ln = v.launches(problem, config)[0]
    auto = ln.grid[1] if knob == "splits" else ln.grid[0]
    return auto, sorted({auto, max(1, auto // 2), 2 * auto})


KNOB = {"v2_pipelined": "splits", "v5_split": "splits", "v2_marlin": "splits", "v4_post": "splits",
        "v3_stripe": "ctas"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", choices=("gemv", "gemm"), help="tune one op only")
    args = ap.parse_args()
    copy = copy_gbps(target_ms=100)
    print(f"# copy ceiling: {copy:.0f} GB/s (read + write); {facts().sms} SMs", flush=True)
    P = weights()
    rows = []
    print(f"{'candidate':52s} {'shape':16s} {'us':>7s} {'GB/s':>6s} {'copy':>5s} {'TFLOP/s':>7s} {'vs cuBLAS':>9s}"
          f" {'regs':>4s} {'CTA/SM':>6s} {'grid':>6s}")

    def emit(cand, key, shape, run, out, ref, nbytes, flops, peer_us=None, occ=(None, None, None)):
        try:
            poison(out)
            run()
            err = assert_close(out, ref, dtype="bfloat16", name=f"{cand} {shape} (seed {SEED})")
            us = bench(run, target_ms=60, check=lambda: assert_close(out, ref, dtype="bfloat16",
                                                                      name=f"{cand} timed")).ms * 1e3
            r = dict(candidate=cand, key=key, shape=shape, us=us, gbs=nbytes / (us * 1e-6) / 1e9,
                     tflops=flops / (us * 1e-6) / 1e12, err=err, regs=occ[0], ctas_per_sm=occ[1], grid=occ[2])
            r["frac"] = r["gbs"] / copy
            r["vs_cublas"] = (peer_us / us) if peer_us else 1.0
            rows.append(r)
            extra = "" if occ[0] is None else f" {occ[0]:4d} {occ[1] or 0:6d} {occ[2]:6d}"
            print(f"{cand:52s} {str(shape):16s} {us:7.1f} {r['gbs']:6.0f} {r['frac']:5.0%} {r['tflops']:7.1f} "
                  f"{r['vs_cublas']:8.2f}x{extra}", flush=True)
            return us
        except Exception as e:  # noqa: BLE001
            msg = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
            print(f"{cand:52s} {str(shape):16s} FAIL {type(e).__name__}: {msg}", flush=True)
            if not isinstance(e, AssertionError):
                traceback.print_exc(limit=3)
            return None

    def sweep(registry, key, shape, arrays, kw, ref, nbytes, flops, peer):
        for label, v in registry.items():
            problem = v.validate(*arrays, **kw)
            if not v.supports(problem):
                print(f"# {v.name} skipped: {v.why_not(problem)}")
                continue
            for config in v.all_configs(problem) or (None,):
                knob = KNOB.get(label)
                auto, choices = split_choices(v, problem, config, knob) if knob else (None, [None])
                for n in choices:
                    extra = {knob: n} if knob else {}
                    tag = "" if not knob else f" {knob}=" + (f"auto({n})" if n == auto else str(n))
                    p = v.validate(*arrays, **kw, **extra)
                    if not v.supports(p, config):
                        print(f"# {v.name} {config}{tag} skipped: {v.why_not(p, config)}")
                        continue
                    emit(f"{key} {label} {config or ''}{tag}", key, shape, v.bind(*arrays, **kw, **extra, config=config),
                         arrays[-1], ref, nbytes, flops, peer, residency(v, p, config))

    if args.only != "gemm":
        x = cupy.random.RandomState(SEED).standard_normal((1, K), dtype=cupy.float32).astype(Q.BF16)
        ref = x.astype(cupy.float32) @ P["Wf"]
        y, yc = cupy.empty((1, N), dtype=Q.BF16), cupy.empty((1, N), dtype=Q.BF16)
        shape, flops = (1, K, N), 2.0 * K * N
        peer = emit("cublas_bf16", "gemv", shape, lambda: cupy.matmul(x, P["Wb"], out=yc), yc, ref,
                    Q.gemv_bf16_nbytes(K, N), flops)
        sweep(Q.GEMV, "gemv", shape, (x, P["qweight"], P["qzeros"], P["s"], y),
              dict(qmma=P["qmma"], qtiled=P["qtiled"]), ref, Q.gemv_nbytes(K, N), flops, peer)
    for M in (() if args.only == "gemv" else (16, 32, 64)):
        a = cupy.random.RandomState(SEED + M).standard_normal((M, K), dtype=cupy.float32).astype(Q.BF16)
        ref = a.astype(cupy.float32) @ P["Wf"]
        c, cc = cupy.empty((M, N), dtype=Q.BF16), cupy.empty((M, N), dtype=Q.BF16)
        shape, flops, key = (M, K, N), 2.0 * M * K * N, f"gemm{M}"
        peer = emit("cublas_bf16", key, shape, lambda: cupy.matmul(a, P["Wb"], out=cc), cc, ref,
                    Q.gemm_bf16_nbytes(M, K, N), flops)
        sweep(Q.GEMM, key, shape, (a, P["qmma"], P["qzeros"], P["s"], c), {}, ref, Q.gemm_nbytes(M, K, N), flops, peer)
        cupy.get_default_memory_pool().free_all_blocks()

    print("\n# best candidate per shape")
    summary = []
    for key in ["gemv", "gemm16", "gemm32", "gemm64"]:
        mine = [r for r in rows if r["key"] == key and r["candidate"] != "cublas_bf16"]
        if not mine:
            continue
        best = min(mine, key=lambda r: r["us"])
        bar, goal = BARS.get(key, (None, None))
        verdict = "" if bar is None else (" goal met" if best["vs_cublas"] >= goal else " bar met" if best["vs_cublas"] >= bar
                                          else f" MISSES bar {bar}x")
        summary.append(dict(key=key, best=best["candidate"], us=best["us"], vs_cublas=best["vs_cublas"], frac=best["frac"]))
        print(f"BEST {key:7s} {best['candidate']:52s} {best['us']:7.1f} us {best['frac']:5.0%} of copy "
              f"{best['vs_cublas']:.2f}x cuBLAS{verdict}")
    print(f"# wall {time.perf_counter() - T0:.1f} s")
    out = os.environ.get("OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        with open(Path(out) / "tune_ch09_quant.json", "w") as f:
            json.dump(dict(copy_gbs=copy, rows=rows, summary=summary), f, indent=1, default=str)


if __name__ == "__main__":
    main()
