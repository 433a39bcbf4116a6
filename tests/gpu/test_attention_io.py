"""Chapter 14's unfused attention (kernels/attention/io_aware.py) on the GPU: cuBLAS + chapter 6's softmax + cuBLAS on
fresh seeded bf16 inputs with out poisoned, against the float64 reference of kernels.attention, on the odd shapes
the forward ladder checks (one query against 4097 keys, GQA, MQA, causal rows that see no key), an odd head
dimension, a scale of its own, softmax launches split into many row ranges, the sampled check against the full
one, and the pool's measured peak against the model. Times nothing. Skips without a GPU."""
import zlib

import pytest

pytestmark = pytest.mark.gpu
SEED = 1402


def _seed(*what) -> int:
    return (SEED * 1_000_003 + zlib.crc32(repr(what).encode())) % 2**31


def _run(shape, seed, scale=None):
    import cupy

    from kernels.attention import io_aware as io
    from utils.arrays import bf16
    from utils.check import poisoned
    q, k, v = io.make_inputs(shape, seed)
    out = poisoned(q.shape, bf16())
    got = io.standard_attention(q, k, v, out, causal=bool(shape[6]), scale=scale)
    assert got is out
    cupy.cuda.get_current_stream().synchronize()
    return q, k, v, out


def _odd():
    from kernels.attention.ladders import ODD
    return list(ODD) + [(1, 3, 1, 37, 199, 40, 0), (2, 2, 2, 129, 1000, 128, 1)]


@pytest.mark.parametrize("shape", _odd(), ids=lambda s: "B{}-Hq{}-Hkv{}-{}x{}-d{}-{}".format(
    *s[:6], "causal" if s[6] else "full"))
def test_standard_attention_matches_the_reference(shape):
    from kernels.attention import reference
    from utils.check import assert_close
    seed = _seed(shape)
    q, k, v, out = _run(shape, seed)
    assert_close(out, reference(q, k, v, causal=bool(shape[6]))[0], dtype="bfloat16",
                 name=f"standard attention {shape} (seed {seed})")


def test_rows_that_see_no_key_are_zero():
    import cupy
    q, k, v, out = _run((1, 2, 1, 300, 100, 64, 1), _seed("empty rows"))
    assert bool(cupy.all(out[:, :, :200].astype(cupy.float32) == 0)), "rows i < Sq - Sk see no key: out = 0"


def test_scale_is_applied():
    from kernels.attention import reference
    from utils.check import assert_close
    shape = (1, 2, 2, 65, 77, 64, 0)
    q, k, v, out = _run(shape, _seed("scale"), scale=0.3)
    assert_close(out, reference(q, k, v, scale=0.3)[0], dtype="bfloat16", name="scale 0.3")


def test_many_softmax_launches(monkeypatch):
    """Shrink the elements a softmax launch may take so that S splits into many row ranges (the path lengths
    beyond 2^31 scores take), odd column count included."""
    from kernels.attention import io_aware as io
    from kernels.attention import reference
    from utils.check import assert_close
    monkeypatch.setattr(io, "SOFTMAX_ELEMENTS", 1000 * 100)
    shape = (2, 4, 2, 333, 1000, 64, 1)
    assert len(io.softmax_chunks(2 * 4 * 333, 1000)) > 5
    q, k, v, out = _run(shape, _seed("chunks"))
    assert_close(out, reference(q, k, v, causal=True)[0], dtype="bfloat16", name="chunked softmax")


def test_sampled_check_agrees_with_the_full_check():
    from kernels.attention import io_aware as io
    from kernels.attention import reference
    from utils.check import CheckFailed
    shape = (2, 4, 2, 257, 300, 128, 1)
    q, k, v, out = _run(shape, _seed("sample"))
    full = reference(q, k, v, causal=True)[0]
    batches, heads, rows = io.sample_where(shape, 64)
    assert float(abs(io.sample_of(full, batches, heads, rows) -
                     io.sample_reference(q, k, v, batches, heads, rows, causal=True)).max()) < 1e-10
    io.check_sample(out, q, k, v, causal=True)
    out[1, 3, 256:257].fill(7.0)                         # a wrong row in the sample must fail it
    with pytest.raises(CheckFailed):
        io.check_sample(out, q, k, v, causal=True)


def test_pool_peak_is_s_and_p():
    from kernels.attention import io_aware as io
    shape = (1, 8, 8, 2048, 2048, 64, 0)
    io.release()
    q, k, v = io.make_inputs(shape, _seed("peak"))
    import cupy

    from utils.arrays import bf16
    out = cupy.empty(q.shape, dtype=bf16())
    _, peak = io.pool_peak(lambda: io.standard_attention(q, k, v, out))
    model = io.standard_peak(shape)
    assert model <= peak <= 1.05 * model + (4 << 20), f"pool peak {peak} against the model's {model}"


def test_v0_rows_configs_agree_on_a_sample():
    """What chapter 14 profiles: v0 at every rows-per-block config on one input, checked on the same sample."""
    import cupy

    from kernels.attention import ATTN_FWD, V0_ROWS
    from kernels.attention import io_aware as io
    from utils.arrays import bf16
    from utils.check import poison
    shape = (1, 2, 2, 300, 333, 64, 0)
    q, k, v = io.make_inputs(shape, _seed("v0 rows"))
    out, lse = cupy.empty(q.shape, dtype=bf16()), cupy.empty((1, 2, 300), dtype=cupy.float32)
    for rows in V0_ROWS[64]:
        poison(out)
        ATTN_FWD["v0_scalar"](q, k, v, out, lse, config=rows)
        io.check_sample(out, q, k, v, name=f"v0 {rows}")
