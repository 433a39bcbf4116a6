"""GPU specs (datasheet leads) and measured ceilings (what rooflines and targets use).

Datasheet figures are the vendors' dense peaks; they are leads, not ceilings. The ceilings every
chapter compares against are *measured* by the book (chapter 2 records them as impl ``ceiling.*``),
and a chapter that states a ratio to copy bandwidth measures the copy again in its own run.
"""
from __future__ import annotations

from .gpu import device_summary, gpu_slug, require_gpu
from .paths import RESULTS

# Vendor datasheets (SXM parts). Bandwidth in TB/s, rates in TFLOP/s (dense), sizes in bytes.
DATASHEET = {
    "H200": dict(sms=132, hbm_tbps=4.8, hbm_gb=141, l2_mb=60, smem_per_sm_kb=228, fp32=67.0,
                 tf32=494.7, bf16=989.4, fp8=1978.9, boost_mhz=1980),
    "H100": dict(sms=132, hbm_tbps=3.35, hbm_gb=80, l2_mb=50, smem_per_sm_kb=228, fp32=67.0,
                 tf32=494.7, bf16=989.4, fp8=1978.9, boost_mhz=1980),
    "A100": dict(sms=108, hbm_tbps=2.039, hbm_gb=80, l2_mb=40, smem_per_sm_kb=164, fp32=19.5,
                 tf32=156.0, bf16=312.0, fp8=None, boost_mhz=1410),
}


def datasheet(name: str | None = None) -> dict:
    """The datasheet entry matching a device name ('NVIDIA H200' -> H200); the running GPU if None."""
    if name is None:
        name = device_summary()["name"]
    for key, spec in DATASHEET.items():
        if key in name.upper():
            return {"part": key, **spec}
    raise KeyError(f"no datasheet figures for {name!r}; known parts: {sorted(DATASHEET)}")


CEILING_IMPLS = {
    "copy": "ceiling.copy",            # device-to-device copy, GB/s counting read + write
    "fma_fp32": "ceiling.fma_fp32",    # FP32 FMA rate, TFLOP/s
    "cublas_bf16": "cublas_bf16",      # cuBLAS bf16 GEMM, TFLOP/s
}


def ceilings(gpu: str | None = None, notebook: str = "02-hopper-architecture") -> dict:
    """Measured ceilings from chapter 2's record: {'copy': GB/s, 'fma_fp32': TFLOP/s, ...}.

    Chapters use these for rooflines; ratios that targets are judged by are taken in the chapter's own run.
    """
    from .record import load
    gpu = gpu or gpu_slug()
    out = {}
    entries = load(gpu, notebook)
    for name, impl in CEILING_IMPLS.items():
        hits = [e for e in entries if e["impl"] == impl]
        if hits:
            out[name] = max(hits, key=lambda e: e["metric"])["metric"]
    if not out:
        raise LookupError(f"no measured ceilings for {gpu} in {RESULTS / gpu / (notebook + '.json')}; "
                          "execute chapter 2 on this GPU first")
    return out


def _copy_job(nbytes: int):
    """(n, run, check) for a device-to-device copy (cudaMemcpyAsync) of ``nbytes`` of fp32."""
    require_gpu()
    import cupy
    n = nbytes // 4
    src = cupy.random.standard_normal(n, dtype=cupy.float32)
    dst = cupy.empty_like(src)

    def run():
        cupy.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, n * 4,
                                      cupy.cuda.runtime.memcpyDeviceToDevice,
                                      cupy.cuda.get_current_stream().ptr)

    def check():
        if not bool((dst == src).all()):
            raise AssertionError("device-to-device copy produced different bytes")

    return n, run, check


def measure_copy(rec, nbytes: int = 1 << 30) -> dict:
    """Device-to-device copy (cudaMemcpyAsync) of ``nbytes``: the HBM ceiling, recorded as ceiling.copy.

    Counts bytes read plus bytes written, as every bandwidth figure in the book does.
    """
    n, run, check = _copy_job(nbytes)
    return rec.time("copy", CEILING_IMPLS["copy"], run, dtype="float32", shape=(n,),
                    nbytes=2 * n * 4, is_peer=True, check=check)


def measure_copy_same_bytes(rec, nbytes: int) -> dict:
    """A device-to-device copy of ``nbytes`` (read ``nbytes``, write ``nbytes``), recorded as op
    ``copy_same_bytes``: what a plain copy of one kernel's input reaches at that size under the same bench,
    launch and ramp included. A kernel that reads and writes those bytes once cannot beat it; on inputs of a
    few tens of MB it sits well below the 1 GiB ``ceiling.copy``."""
    n, run, check = _copy_job(nbytes)
    return rec.time("copy_same_bytes", CEILING_IMPLS["copy"], run, dtype="float32", shape=(n,),
                    nbytes=2 * n * 4, is_peer=True, check=check)


def copy_gbps(nbytes: int = 1 << 30, **bench_kw) -> float:
    """The same copy ceiling in GB/s (read + written), timed without a record (tuning scripts)."""
    from .bench import bench
    n, run, check = _copy_job(nbytes)
    t = bench(run, **bench_kw)
    check()
    return 2 * n * 4 / (t.ms * 1e-3) / 1e9


def measure_cublas_bf16(rec, n: int = 8192) -> dict:
    """cuBLAS bf16 GEMM (n×n×n, fp32 accumulation) on standard-normal data, recorded as cublas_bf16."""
    require_gpu()
    import cupy
    import ml_dtypes
    bf16 = ml_dtypes.bfloat16
    a = cupy.random.standard_normal((n, n), dtype=cupy.float32).astype(bf16)
    b = cupy.random.standard_normal((n, n), dtype=cupy.float32).astype(bf16)
    c = cupy.empty((n, n), dtype=bf16)

    def run():
        cupy.matmul(a, b, out=c)

    def check():
        from .check import assert_close
        rows = slice(0, 64)
        ref = a[rows].astype(cupy.float32) @ b.astype(cupy.float32)
        assert_close(c[rows], ref, dtype="bfloat16", name="cuBLAS bf16 GEMM")

    return rec.time("gemm", CEILING_IMPLS["cublas_bf16"], run, dtype="bfloat16", shape=(n, n, n),
                    flops=2.0 * n ** 3, nbytes=3 * n * n * 2, is_peer=True, check=check, flush=False)
