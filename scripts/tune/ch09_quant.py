"""Chapter 9 tuning batch (round 5: + Marlin v4, zero point and scale after the mma): W4A16 GEMV (batch 1) and the Marlin-style GEMM (M = 16, 32, 64) at
K = N = 8192 against cuBLAS bf16 on the same weights dequantized to bf16. Candidates: the measured best so
far (GEMV v1, Marlin v2's default instance per M with automatic split-K) plus the new GEMV v5 (split-K grid
of whole waves, <= 64 registers) in each instantiated (BN, rows) and a few K splits, and the new Marlin v3
(persistent striped grid) in each instance for the M and a few CTA counts.
Each row prints the kernel's registers and resident CTAs per SM (the driver's occupancy calculator).
Run from the repo root: python scripts/tune/ch09_quant.py. Writes $OUT/tune_ch09_quant.json when OUT is set.
One row per (candidate, shape); a BEST line per shape. A failing candidate prints its traceback and the
batch goes on."""
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
    q, z, s = Q.random_int4_problem(K, N)
    qweight, qzeros = Q.pack_gptq(q, z)
    qmma = Q.pack_mma(q)
    qtiled = Q.pack_gemv_tiled(qweight)
    Wb = Q.dequantize_int4(q, s, z).astype(Q.BF16)
    return dict(qweight=qweight, qzeros=qzeros, qmma=qmma, qtiled=qtiled, s=s, Wb=Wb, Wf=Wb.astype(cupy.float32))


def residency(name, threads=256, smem=0):
    """(registers, resident CTAs per SM) of a loaded kernel, from the driver."""
    fn = Q.SOURCE.function(name)
    if smem:
        Q._set_smem(fn, smem)
    blocks = cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(fn.kernel.ptr, threads, smem)
    return int(fn.num_regs), int(blocks)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--skip-v3", action="store_true", help="leave out the Marlin v3 sweep (measured in round 4)")
    ap.add_argument("--skip-gemv-v5", action="store_true", help="leave out the GEMV v5 sweep (measured in round 4)")
    args = ap.parse_args()
    t = time.perf_counter()
    Q.SOURCE.function(Q.gemv_v2_name(*Q.GEMV_V2_DEFAULT))           # one NVRTC compile builds every instance
    print(f"# NVRTC compile: {time.perf_counter() - t:.1f} s", flush=True)
    copy = copy_gbps(target_ms=100)
    print(f"# copy ceiling: {copy:.0f} GB/s (read + write)", flush=True)
    P = problem()
    rows = []
    hdr = (f"{'candidate':44s} {'shape':16s} {'us':>7s} {'GB/s':>6s} {'copy':>5s} {'TFLOP/s':>7s} {'vs cuBLAS':>9s}"
           f" {'regs':>4s} {'CTA/SM':>6s} {'grid':>6s}")

    def emit(cand, key, shape, fn, out, ref, nbytes, flops, peer_us=None, kernel=None, grid=None):
        try:
            regs, res = residency(*kernel) if kernel else (None, None)
            out[...] = poisoned(out.shape, Q.BF16)
            fn()
            err = assert_close(out, ref, dtype="bfloat16", name=f"{cand} {shape}")
            tm = bench(fn, target_ms=60, check=lambda: assert_close(out, ref, dtype="bfloat16", name=f"{cand} timed"))
            us = tm.ms * 1e3
            r = dict(candidate=cand, key=key, shape=shape, us=us, gbs=nbytes / (us * 1e-6) / 1e9,
                     tflops=flops / (us * 1e-6) / 1e12, err=err)
            r["frac"] = r["gbs"] / copy
            r["vs_cublas"] = (peer_us / us) if peer_us else 1.0
            r.update(regs=regs, ctas_per_sm=res, grid=grid)
            rows.append(r)
            extra = "" if regs is None else f" {regs:4d} {res:6d} {grid if grid is not None else '':>6}"
            print(f"{cand:44s} {str(shape):16s} {us:7.1f} {r['gbs']:6.0f} {r['frac']:5.0%} {r['tflops']:7.1f} "
                  f"{r['vs_cublas']:8.2f}x{extra}", flush=True)
            return us
        except Exception as e:  # noqa: BLE001
            msg = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
            print(f"{cand:44s} {str(shape):16s} FAIL {type(e).__name__}: {msg}", flush=True)
            if not isinstance(e, AssertionError):
                traceback.print_exc(limit=3)
            return None

    print(hdr)
    # ---- GEMV, batch 1: cuBLAS, v1 (the measured best so far), v5 in every instance and a few K splits --------
    x = (cupy.random.standard_normal((1, K), dtype=cupy.float32)).astype(Q.BF16)
    ref = x.astype(cupy.float32) @ P["Wf"]
    shape = (1, K, N)
    y = cupy.empty((1, N), dtype=Q.BF16)
    yc = cupy.empty((1, N), dtype=Q.BF16)
    flops = 2.0 * K * N
    sms = Q._sms()
    peer = emit("cublas_bf16", "gemv", shape, lambda: cupy.matmul(x, P["Wb"], out=yc), yc, ref,
                Q.gemv_bf16_nbytes(K, N), flops)
    nb = Q.gemv_nbytes(K, N)
    emit("gemv v1_magic", "gemv", shape, lambda: Q.GEMV_VERSIONS["v1_magic"].launch(x, P["qweight"], P["qzeros"], P["s"], y),
         y, ref, nb, flops, peer, kernel=("w4a16_gemv_v1_magic",), grid=Q.gemv_grid(N)[0])
    emit("gemv v6_tiled", "gemv", shape, lambda: Q.launch_gemv_v6(x, P["qtiled"], P["qzeros"], P["s"], y),
         y, ref, nb, flops, peer, kernel=("w4a16_gemv_v6_tiled",), grid=Q.gemv_grid(N)[0])
    for bn, rws in ([] if args.skip_gemv_v5 else Q.GEMV_V5_CONFIGS):
        auto = Q.gemv_v5_plan(K, N, bn, rws, sms=sms)[1][1]
        for splits in sorted({auto, max(1, auto // 2), 2 * auto}):
            name, grid = Q.gemv_v5_plan(K, N, bn, rws, splits, sms=sms)
            tag = f"auto({splits})" if splits == auto else str(splits)
            emit(f"gemv v5_split BN={bn} rows={rws} splits={tag}", "gemv", shape,
                 lambda bn=bn, rws=rws, splits=splits: Q.launch_gemv_v5(x, P["qweight"], P["qzeros"], P["s"], y,
                                                                       bn=bn, rows=rws, splits=splits),
                 y, ref, nb, flops, peer, kernel=(name,), grid=grid[0] * grid[1])
    # ---- GEMM, M = 16, 32, 64: Marlin v2's default instance (split-K auto), Marlin v3 in every instance -------
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
        ntw, st = Q.MARLIN_DEFAULT[mt]
        name, grid, smem = Q.marlin_plan(M, K, N, ntw, st, sms=sms)
        emit(f"marlin v2 NTW={ntw} st={st} splits=auto({grid[1]})", key, shape,
             lambda ntw=ntw, st=st: Q.launch_marlin(a, P["qmma"], P["qzeros"], P["s"], c, ntw=ntw, stages=st),
             c, ref, nb, flops, peer, kernel=(name, 256, smem), grid=grid[0] * grid[1])
        # Marlin v4 (zero point and scale after the mma): every instance, the planned K split and its neighbours
        for _, ntw, st in [cfg for cfg in Q.MARLIN_V4_CONFIGS if cfg[0] == mt]:
            auto = Q.marlin_plan(M, K, N, ntw, st, sms=sms, kernel=Q.MARLIN_V4)[1][1]
            for splits in sorted({auto, max(1, auto // 2), 2 * auto}):
                name, grid, smem = Q.marlin_plan(M, K, N, ntw, st, splits, sms=sms, kernel=Q.MARLIN_V4)
                tag = f"auto({splits})" if splits == auto else str(splits)
                emit(f"marlin v4 NTW={ntw} st={st} splits={tag}", key, shape,
                     lambda ntw=ntw, st=st, splits=splits: Q.launch_marlin_v4(a, P["qmma"], P["qzeros"], P["s"], c,
                                                                              ntw=ntw, stages=st, splits=splits),
                     c, ref, nb, flops, peer, kernel=(name, 256, smem), grid=grid[0] * grid[1])
        for _, ntw, st in ([] if args.skip_v3 else [cfg for cfg in Q.MARLIN_V3_CONFIGS if cfg[0] == mt]):
            name, grid, smem, _ = Q.marlin_v3_plan(M, K, N, ntw, st, sms=sms)
            try:
                driver_res = residency(name, 256, smem)[1]
            except Exception:  # noqa: BLE001
                traceback.print_exc(limit=3)
                driver_res = None
            planned = Q.marlin_v3_ctas_per_sm(mt, ntw, st)
            # one wave as planned; the driver's own count if it differs; half a wave more / less
            counts = {grid[0], grid[0] + sms, max(sms, grid[0] - sms)}
            if driver_res:
                counts.add(sms * driver_res)
            for ctas in sorted(counts):
                tag = f"auto({ctas})" if ctas == grid[0] else str(ctas)
                emit(f"marlin v3 NTW={ntw} st={st} ctas={tag}", key, shape,
                     lambda ntw=ntw, st=st, ctas=ctas: Q.launch_marlin_v3(a, P["qmma"], P["qzeros"], P["s"], c,
                                                                          ntw=ntw, stages=st, ctas=ctas),
                     c, ref, nb, flops, peer, kernel=(name, 256, smem), grid=ctas)
            if driver_res is not None and driver_res != planned:
                print(f"# marlin v3 NTW={ntw} st={st}: driver allows {driver_res} CTAs/SM, plan assumed {planned}")
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
