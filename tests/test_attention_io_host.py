"""Chapter 14's models and checks on the CPU (kernels/attention/io_aware.py): the byte and footprint models against
counts written out plainly, the longest sequence that fits, the softmax launches' row ranges, the IO model of the
tiled algorithm, the sampled reference against the full one, argument validation, and reading Nsight Compute's
export."""
import math

import numpy as np
import pytest

from kernels import attention as A
from kernels.attention import io_aware as io
from tests.fakes import FakeDeviceArray
from utils.arrays import bf16

SEED = 1401


def test_standard_bytes_are_eight_per_score_plus_the_operands():
    B, H, S, D = 2, 3, 40, 16
    shape = (B, H, H, S, S, D, 0)
    ss, nd = B * H * S * S, B * H * S * D
    # S written; P read... : S write 2, softmax read 2 + write 2, P read 2 = 8 bytes a score; q, k read, v read,
    # out written: 2 bytes each
    assert io.standard_bytes(shape) == 8 * ss + 2 * 4 * nd
    assert io.fused_bytes(shape) == 2 * 4 * nd + 4 * B * H * S
    assert io.standard_peak(shape) == 4 * ss
    assert io.io_bytes(shape) == 2 * 4 * nd


def test_standard_bytes_count_gqa_keys_once_and_the_mask():
    B, Hq, Hkv, Sq, Sk, D = 1, 8, 2, 5, 7, 4
    full = io.standard_kernels((B, Hq, Hkv, Sq, Sk, D, 0))
    causal = io.standard_kernels((B, Hq, Hkv, Sq, Sk, D, 1))
    gemm1 = full["S = scale Q K^T (cuBLAS)"]["bytes"]
    assert gemm1 == 2 * (B * Hq * Sq * D + B * Hkv * Sk * D + B * Hq * Sq * Sk)
    hidden = sum(Sk - min(Sk, max(0, i + Sk - Sq + 1)) for i in range(Sq))     # bottom-right alignment
    assert io.masked_entries(Sq, Sk, True) == hidden
    assert causal["causal mask into S"]["bytes"] == 2 * B * Hq * hidden
    assert set(causal) - set(full) == {"causal mask into S"}


def test_math_model_is_fp32_and_larger():
    shape = (1, 4, 4, 256, 256, 64, 0)
    ss = 4 * 256 * 256
    assert io.math_peak(shape) >= 8 * ss
    assert io.math_bytes(shape) > 2.5 * io.standard_bytes(shape)
    assert io.math_kernels(shape)["P = softmax(S) (fp32)"]["bytes"] == 8 * ss


def test_intensity_is_about_d_over_two_unfused_and_s_over_two_fused():
    for D in (64, 128):
        shape = (1, 8, 8, 8192, 8192, D, 0)
        assert abs(io.intensity(shape) - D / 2) / (D / 2) < 0.02
        assert abs(io.intensity(shape, "fused") - 8192 / 2) / 4096 < 0.02


@pytest.mark.parametrize("free", [0, 1, 10**6, 141 * 2**30, 80 * 2**30 + 12345])
@pytest.mark.parametrize("B,H,D", [(1, 32, 128), (2, 16, 64), (1, 1, 1)])
def test_max_seqlen_is_the_boundary(free, B, H, D):
    n = io.max_seqlen(free, B, H, D)

    def need(m):
        return io.standard_peak((B, H, H, m, m, D, 0)) + io.io_bytes((B, H, H, m, m, D, 0))
    assert n >= 0 and (n == 0 or need(n) <= free) and need(n + 1) > free


def test_max_seqlen_refuses_negative_memory():
    with pytest.raises(ValueError):
        io.max_seqlen(-1)


@pytest.mark.parametrize("rows,cols", [(1, 1), (7, 3), (32 * 16384, 16384), (999_983, 4097), (100_000, 40_000),
                                       (3, 2**28), (65536 * 3 + 5, 33_000), (1_000_000, 5001)])
def test_softmax_chunks_cover_the_rows_in_legal_launches(rows, cols):
    chunks = io.softmax_chunks(rows, cols)
    assert chunks[0][0] == 0 and chunks[-1][1] == rows
    assert all(a[1] == b[0] for a, b in zip(chunks, chunks[1:]))
    for r0, r1 in chunks:
        assert r1 > r0 and (r1 - r0) * cols < 2**31
        assert (r0 * cols * 2) % 16 == 0                 # each launch's first element 16-byte aligned
        if cols > io.SOFTMAX_BLOCK_COLS:
            assert r1 - r0 <= io.SOFTMAX_GRID_Y


def test_softmax_chunks_one_launch_when_it_fits():
    assert io.softmax_chunks(4096, 4096) == [(0, 4096)]
    with pytest.raises(ValueError):
        io.softmax_chunks(0, 4)


def test_tiled_reads_fall_as_one_over_rows_per_block():
    shape = io.NCU_SHAPE
    B, Hq, Hkv, Sq, Sk, D, _ = shape
    reads = {r: io.tiled_kv_reads(shape, r) for r in io.NCU_ROWS}
    for r in io.NCU_ROWS:
        assert reads[r] == B * Hq * math.ceil(Sq / r) * 2 * 2 * Sk * D
    assert reads[16] == 8 * reads[128]
    assert io.compulsory_reads(shape) == 2 * (B * Hq * Sq * D + 2 * B * Hkv * Sk * D)
    # the ragged last block still reads everything
    assert io.tiled_kv_reads((1, 1, 1, 65, 10, 4, 0), 64) == 2 * 2 * 2 * 10 * 4
    with pytest.raises(ValueError):
        io.tiled_kv_reads((1, 1, 1, 8, 8, 4, 1), 4)


def test_v0_l1_sectors_and_onchip_bytes():
    shape = (1, 2, 2, 128, 256, 64, 0)
    assert io.v0_l1_sectors(shape, 32) == io.tiled_kv_reads(shape, 32) // 32 + 2 * 128 * 64
    assert io.v0_onchip_bytes(64, 64) == 2 * 64 * 66 + 2 * 2 * A.V0_BC * 64 + 4 * 64 * 64
    m = [io.v0_onchip_bytes(64, r) for r in io.NCU_ROWS]
    assert m == sorted(m)


def test_theorem2_order():
    N, d = 8192, 64
    small, big = io.theorem2_accesses(N, d, 8 * 1024), io.theorem2_accesses(N, d, 16 * 1024)
    kv = lambda a: a - 2 * N * d           # noqa: E731 - the K/V term
    assert kv(small) / kv(big) == pytest.approx(2, rel=0.01)     # twice the SRAM, half the K/V re-reads
    assert kv(small) == 2 * N * d * math.ceil(N / (8 * 1024 // (4 * d)))
    d2 = io.theorem2_accesses(N, 2 * d, 8 * 1024) - 2 * N * 2 * d       # twice d: four times the re-reads
    assert d2 / kv(small) == pytest.approx(4, rel=0.01)
    # with M = N d the whole of K, V fits: one pass, the accesses are Theta(N d)
    assert io.theorem2_accesses(N, d, 4 * N * d) == 4.0 * N * d
    assert io.standard_accesses(N, d) == 4 * N * d + 4 * N * N
    assert io.standard_accesses(N, d) / io.theorem2_accesses(N, d, 116736) > 10


def test_predictions_follow_the_ledger():
    ceil = {"copy": 4000.0, "cublas_bf16": 700.0, "fma_fp32": 60.0}
    for D in (64, 128):
        for s in io.speedup_shapes(D, False):
            fl = io.floor_us(s, ceil)
            std = io.predicted_standard_us(s, ceil)
            assert std >= max(fl["flops"], fl["standard_bytes"]) * 0.999
            assert io.predicted_fused_us(s, ceil) == pytest.approx(fl["flops"] / io.FUSED_FRACTION)
    d64, d128 = io.speedup_shapes(64, False)[-1], io.speedup_shapes(128, False)[-1]
    sp = {s: io.predicted_standard_us(s, ceil) / io.predicted_fused_us(s, ceil) for s in (d64, d128)}
    assert sp[d64] > sp[d128] > 1          # the unfused path's bytes do not grow with d, the FLOPs do
    assert io.ledger_table(io.speedup_shapes(64, False), ceil).rows


def test_speedup_shapes_follow_flash_attention_benchmark():
    assert io.speedup_shapes(64, False)[0] == (32, 32, 32, 512, 512, 64, 0)
    assert io.speedup_shapes(128, True)[-1] == (1, 16, 16, 16384, 16384, 128, 1)
    with pytest.raises(ValueError):
        io.speedup_shapes(96, False)


@pytest.mark.parametrize("shape", [(1, 2, 1, 9, 13, 8, 0), (2, 4, 2, 11, 7, 8, 1), (1, 2, 2, 6, 2, 4, 1),
                                   (1, 1, 1, 1, 5, 4, 1)])
def test_sample_reference_is_the_full_reference_on_those_rows(shape):
    rng = np.random.default_rng(SEED)
    B, Hq, Hkv, Sq, Sk, D, causal = shape
    q = rng.standard_normal((B, Hq, Sq, D)).astype(np.float32).astype(bf16())
    k, v = (rng.standard_normal((B, Hkv, Sk, D)).astype(np.float32).astype(bf16()) for _ in range(2))
    full = A.reference(q, k, v, causal=bool(causal), scale=0.4)[0]
    batches, heads, rows = io.sample_where(shape, n_rows=4)
    got = io.sample_reference(q, k, v, batches, heads, rows, causal=bool(causal), scale=0.4)
    np.testing.assert_allclose(got, io.sample_of(full, batches, heads, rows), rtol=1e-12, atol=1e-12)


def test_sample_rows_keep_both_ends():
    assert list(io.sample_rows(1)) == [0]
    r = io.sample_rows(4097, 64)
    assert r[0] == 0 and r[-1] == 4096 and len(r) == 64


def arrays(B=2, Hq=4, Hkv=2, Sq=33, Sk=70, D=64, **over):
    shapes = {"q": (B, Hq, Sq, D), "k": (B, Hkv, Sk, D), "v": (B, Hkv, Sk, D), "out": (B, Hq, Sq, D)}
    return [over.get(n, FakeDeviceArray(s, bf16(), ptr=(i + 1) << 32)) for i, (n, s) in enumerate(shapes.items())]


def test_problem_takes_gqa_odd_head_dims_and_the_default_scale():
    p = io.standard_problem(*arrays(D=40))
    assert (p.B, p.Hq, p.Hkv, p.Sq, p.Sk, p.D, p.causal, p.group, p.rows) == (2, 4, 2, 33, 70, 40, False, 2,
                                                                                2 * 4 * 33)
    assert p.scale == pytest.approx(1 / math.sqrt(40))
    assert io.standard_problem(*arrays(), causal=True, scale=0.5).scale == 0.5


@pytest.mark.parametrize("change,match", [
    ({"q": FakeDeviceArray((2, 4, 33, 64), np.float32)}, "q: expected dtype bfloat16"),
    ({"k": FakeDeviceArray((2, 2, 70, 32), bf16())}, "k: expected shape"),
    ({"v": FakeDeviceArray((2, 2, 71, 64), bf16())}, "v: expected shape"),
    ({"out": FakeDeviceArray((2, 4, 32, 64), bf16())}, "out: expected shape"),
    ({"k": FakeDeviceArray((2, 3, 70, 64), bf16()), "v": FakeDeviceArray((2, 3, 70, 64), bf16())}, "GQA"),
    ({"q": np.zeros((2, 4, 33, 64), np.float32)}, "CUDA device array"),
    ({"q": FakeDeviceArray((2, 4, 33, 64), bf16(), strides=(2, 4 * 33 * 64 * 2, 64 * 2, 2))}, "C-contiguous"),
])
def test_problem_rejects_bad_arguments(change, match):
    with pytest.raises(ValueError, match=match):
        io.standard_problem(*arrays(**change))


@pytest.mark.parametrize("kw,match", [({"scale": -1.0}, "scale"), ({"scale": float("nan")}, "scale"),
                                      ({"scale": True}, "scale"), ({"causal": 1}, "causal")])
def test_problem_rejects_bad_keywords(kw, match):
    with pytest.raises(ValueError, match=match):
        io.standard_problem(*arrays(), **kw)


def test_check_sizes():
    with pytest.raises(ValueError, match=">= 1"):
        io.check_sizes(1, 1, 1, 0, 1, 64)
    with pytest.raises(ValueError, match="int32"):
        io.check_sizes(1, 2, 1, 2**30, 4, 64)


def _entry(name, **metrics):
    return {"kernel": name, **metrics}


def test_counters_by_rows_reads_template_arguments_or_launch_order():
    named = [_entry(f"void attn_fwd_scalar<64, {r}, 32>(const __nv_bfloat16 *, int)", x=r) for r in (128, 16, 64, 32)]
    assert {r: e["x"] for r, e in io.counters_by_rows(named).items()} == {16: 16, 32: 32, 64: 64, 128: 128}
    plain = [_entry("attn_fwd_scalar", x=i) for i in range(4)]
    assert {r: e["x"] for r, e in io.counters_by_rows(plain).items()} == {16: 0, 32: 1, 64: 2, 128: 3}
    with pytest.raises(ValueError, match="one profiled"):
        io.counters_by_rows(plain[:3])


def test_ncu_export_to_counters():
    from kernels.sgemm.traffic import parse_ncu_csv
    metrics = list(io.NCU_METRICS.values())
    header = '"ID","Kernel Name",' + ",".join(f'"{m}"' for m in metrics)
    units = '"","",' + ",".join('"sector"' if "sectors" in m else '"byte"' if "bytes" in m else '"ns"'
                               for m in metrics)
    lines = [header, units] + [f'"{i}","attn_fwd_scalar<64, {r}, 32>",' + ",".join(f'"{(i + 1) * 1000 + j}"'
                                                                                     for j in range(len(metrics)))
                               for i, r in enumerate(io.NCU_ROWS)]
    got = io.counters_by_rows(parse_ncu_csv("\n".join(lines), metrics))
    assert got[32]["lts__t_sectors_srcunit_tex_op_read.sum"] == 2001
    assert got[128]["dram__bytes_read.sum"] == 4002


def test_ncu_command_profiles_warm_launches_with_clocks_alone():
    cmd = io.ncu_command("/tmp/r", ncu="ncu", python="python")
    assert cmd[:5] == ["ncu", "--profile-from-start", "off", "--clock-control", "none"]
    assert cmd[cmd.index("-m") + 1] == "kernels.attention.io_aware"
    assert cmd[-len(io.NCU_ROWS):] == [str(r) for r in io.NCU_ROWS]
    assert all(m in cmd[cmd.index("--metrics") + 1] for m in io.NCU_METRICS.values())


def test_io_table_without_ncu_shows_the_model_only():
    t = io.io_table(io.NCU_SHAPE, None)
    assert len(t.rows) == len(io.NCU_ROWS) and t.column("ncu: DRAM read GB") == ["—"] * len(io.NCU_ROWS)


def test_child_process_usage():
    with pytest.raises(SystemExit, match="usage"):
        io.main(["1", "2"])


def test_the_fill_kernel_compiles():
    from utils.build import ToolchainMissing, compile_source
    try:
        comp = compile_source(io.FILL_SOURCE, arch="sm_80")
    except ToolchainMissing as e:
        pytest.skip(str(e))
    assert set(comp.report) == {"attn_causal_fill_bf16"}
