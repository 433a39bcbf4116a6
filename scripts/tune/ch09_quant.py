"""Chapter 9 tuning batch (round 3): W4A16 GEMV (batch 1) and the Marlin-style GEMM (M = 16, 32, 64) at
K = N = 8192 against cuBLAS bf16 on the same weights dequantized to bf16. Candidates: the measured best
(GEMV v1, Marlin's default instance per M with automatic split-K) plus the new GEMV v4 (tensor cores on
the biased codes, zero point and scale once per group) in each instantiated (NTW, warps).
Run from the repo root: python scripts/tune/ch09_quant.py [--quick].
Writes $OUT/tune_ch09_quant.json when OUT is set. One row per (candidate, shape); a BEST line per shape."""
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
from utils.hardware import copy_gbps  # noqa: E402
from utils.check import assert_close, poisoned  # noqa: E402

K = N = 8192
T0 = time.perf_counter()
BARS = {"gemv": (3.0, 4.5), "gemm16": (2.5, 4.0)}




def problem():
    W = cupy.random.standard_normal((K, N), dtype=cupy.float32) * 0.02
    q, s32, z = Q.quantize_int4(W)
    s = s32.astype(Q.BF16)
    qweight, qzeros = Q.pack_gptq(q, z)
    qmma = Q.pack_mma(q)
    Wb = Q.dequantize_int4(q, s, z).astype(Q.BF16)
    return dict(qweight=qweight, qzeros=qzeros, qmma=qmma, s=s, Wb=Wb, Wf=Wb.astype(cupy.float32))


def main():
    ap = argparse.ArgumentParser()
    ap.parse_args()
    t = time.perf_counter()
    Q.SOURCE.function(Q.gemv_v2_name(*Q.GEMV_V2_DEFAULT))           # one NVRTC compile builds every instance
    print(f"# NVRTC compile: {time.perf_counter() - t:.1f} s", flush=True)
    copy = copy_gbps(target_ms=100)
    print(f"# copy ceiling: {copy:.0f} GB/s (read + write)", flush=True)
    P = problem()
    rows = []
    hdr = f"{'candidate':44s} {'shape':16s} {'us':>7s} {'GB/s':>6s} {'copy':>5s} {'TFLOP/s':>7s} {'vs cuBLAS':>9s}"

    def emit(cand, key, shape, fn, out, ref, nbytes, flops, peer_us=None):
        try:
            out[...] = poisoned(out.shape, Q.BF16)
            fn()
            err = assert_close(out, ref, dtype="bfloat16", name=f"{cand} {shape}")
            tm = bench(fn, target_ms=60, check=lambda: assert_close(out, ref, dtype="bfloat16", name=f"{cand} timed"))
            us = tm.ms * 1e3
            r = dict(candidate=cand, key=key, shape=shape, us=us, gbs=nbytes / (us * 1e-6) / 1e9,
                     tflops=flops / (us * 1e-6) / 1e12, err=err)
            r["frac"] = r["gbs"] / copy
            r["vs_cublas"] = (peer_us / us) if peer_us else 1.0
            rows.append(r)
            print(f"{cand:44s} {str(shape):16s} {us:7.1f} {r['gbs']:6.0f} {r['frac']:5.0%} {r['tflops']:7.1f} "
                  f"{r['vs_cublas']:8.2f}x", flush=True)
            return us
        except Exception as e:  # noqa: BLE001
            msg = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
            print(f"{cand:44s} {str(shape):16s} FAIL {type(e).__name__}: {msg}", flush=True)
            if not isinstance(e, AssertionError):
                traceback.print_exc(limit=3)
            return None

    print(hdr)
    # ---- GEMV, batch 1: cuBLAS, v1 (the measured best so far), v4 in every instantiated (NTW, warps) ----------
    x = (cupy.random.standard_normal((1, K), dtype=cupy.float32)).astype(Q.BF16)
    ref = x.astype(cupy.float32) @ P["Wf"]
    shape = (1, K, N)
    y = cupy.empty((1, N), dtype=Q.BF16)
    yc = cupy.empty((1, N), dtype=Q.BF16)
    flops = 2.0 * K * N
    peer = emit("cublas_bf16", "gemv", shape, lambda: cupy.matmul(x, P["Wb"], out=yc), yc, ref,
                Q.gemv_bf16_nbytes(K, N), flops)
    nb = Q.gemv_nbytes(K, N)
    emit("gemv v1_magic", "gemv", shape, lambda: Q.GEMV_VERSIONS["v1_magic"].launch(x, P["qweight"], P["qzeros"], P["s"], y),
         y, ref, nb, flops, peer)
    for ntw, wps in Q.GEMV_V4_CONFIGS:
        emit(f"gemv v4_mma NTW={ntw} warps={wps}", "gemv", shape, lambda ntw=ntw, wps=wps: Q.launch_gemv_v4(
            x, P["qmma"], P["qzeros"], P["s"], y, ntw=ntw, warps=wps), y, ref, nb, flops, peer)
    # ---- GEMM, M = 16, 32, 64: the default Marlin instance per M (run 1's best), split-K auto ------------
    for M in (16, 32, 64):
        a = cupy.random.standard_normal((M, K), dtype=cupy.float32).astype(Q.BF16)
        ref = a.astype(cupy.float32) @ P["Wf"]
        shape = (M, K, N)
        key = f"gemm{M}"
        c = cupy.empty((M, N), dtype=Q.BF16)
        cc = cupy.empty((M, N), dtype=Q.BF16)
        flops = 2.0 * M * K * N
        peer = emit("cublas_bf16", key, shape, lambda: cupy.matmul(a, P["Wb"], out=cc), cc, ref,
                    Q.gemm_bf16_nbytes(M, K, N), flops)
        nb = Q.gemm_nbytes(M, K, N)
        mt = -(-M // 16)
        for _, ntw, st in [(mt, *Q.MARLIN_DEFAULT[mt])]:
            auto = Q.marlin_plan(M, K, N, ntw, st)[1][1]
            cand = f"marlin NTW={ntw} st={st} splits=auto({auto})"
            emit(cand, key, shape, lambda ntw=ntw, st=st: Q.launch_marlin(
                a, P["qmma"], P["qzeros"], P["s"], c, ntw=ntw, stages=st), c, ref, nb, flops, peer)
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
        print(f"BEST {key:7s} {best['candidate']:44s} {best['us']:7.1f} us {best['frac']:5.0%} of copy "
              f"{best['vs_cublas']:.2f}x cuBLAS{verdict}")
    print(f"# wall {time.perf_counter() - T0:.1f} s")
    out = os.environ.get("OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        with open(Path(out) / "tune_ch09_quant.json", "w") as f:
            json.dump(dict(copy_gbs=copy, rows=rows, summary=summary), f, indent=1, default=str)


if __name__ == "__main__":
    main()
