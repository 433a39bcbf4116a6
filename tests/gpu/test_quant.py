"""Chapter 9 kernels on fresh seeded random data with poisoned outputs: INT8 and FP8 quantize/dequantize
(bit-exact against the references), every INT4 conversion version (exact), every W4A16 GEMV and GEMM
version (bf16 tolerance) at every instantiated config, on shapes that are not multiples of the tiles and
with several K splits; determinism of the split-K reductions; PyTorch's tinygemm peer.
Each test is parametrized by version label, so a failure names the version; the seed is in every message."""
import numpy as np
import pytest

from kernels import quant as Q  # importing needs no GPU

pytestmark = pytest.mark.gpu
SEED = 9
CONVERT_LABELS, GEMV_LABELS, GEMM_LABELS = list(Q.CONVERT), list(Q.GEMV), list(Q.GEMM)   # a new version is tested as it is registered


def _bf16_normal(shape, seed=SEED):
    import cupy
    from kernels import quant as Q
    return cupy.random.RandomState(seed).standard_normal(shape, dtype=cupy.float32).astype(Q.BF16)


def _gemv_case(K, N, seed=SEED):
    """(args, kwargs, ref): a random batch-1 W4A16 problem (GPTQ layout plus the copies v4 and v6 read),
    the output poisoned, and its fp32 reference."""
    from kernels import quant as Q
    from utils.check import poisoned
    q, z, s = Q.random_int4_problem(K, N, seed=seed)
    x = _bf16_normal((1, K), seed)
    qweight, qzeros = Q.pack_gptq(q, z)
    kw = {"qtiled": Q.pack_gemv_tiled(qweight)}
    if N % 16 == 0:
        kw["qmma"] = Q.pack_mma(q)
    return (x, qweight, qzeros, s, poisoned((1, N), Q.BF16)), kw, Q.gemv_reference(x, qweight, qzeros, s)


def _gemm_case(M, K, N, seed=SEED):
    """(args, ref): a random W4A16 GEMM problem (shuffled weights), the output poisoned, and the fp32
    reference on exactly the bf16 weights the B fragments hold."""
    import cupy
    from kernels import quant as Q
    from utils.check import poisoned
    q, z, s = Q.random_int4_problem(K, N, seed=seed)
    a = _bf16_normal((M, K), seed)
    W = Q.dequantize_int4(q, s, z).astype(Q.BF16).astype(cupy.float32)
    return (a, Q.pack_mma(q), Q.pack_gptq(q, z)[1], s, poisoned((M, N), Q.BF16)), a.astype(cupy.float32) @ W


def _configs(v, problem):
    return v.all_configs(problem) or (None,)


@pytest.mark.parametrize("shape", [(37, 1000), (37, 999), (1, 8), (5, 1), (256, 4096)])
def test_int8_quant_and_dequant(shape):
    import cupy
    from kernels import quant as Q
    from utils.check import assert_close, poisoned
    w = _bf16_normal(shape)
    q, scale = poisoned(shape, np.int8), poisoned((shape[0],), np.float32)
    Q.launch_int8_quant(w, q, scale)
    q_ref, s_ref = Q.int8_reference(w)
    assert_close(scale, s_ref, dtype="exact", name=f"int8 scale {shape}")
    assert_close(q, q_ref, dtype="exact", name=f"int8 q {shape}")
    back = poisoned(shape, Q.BF16)
    Q.launch_int8_dequant(q, scale, back)
    assert_close(back, Q.int8_dequant_reference(q_ref, s_ref), dtype="bfloat16", name=f"int8 dequant {shape}")
    assert float(cupy.abs(back.astype(cupy.float32) - w.astype(cupy.float32)).max()) <= float(scale.max())


@pytest.mark.parametrize("shape", [(1823, 781), (7,), (64, 128), (3, 5, 9)])
def test_fp8_quant_and_dequant(shape):
    import cupy
    from kernels import quant as Q
    from utils.check import assert_close, poisoned
    x = _bf16_normal(shape)
    q, scale = poisoned(shape, np.uint8), poisoned((1,), np.float32)
    amax = cupy.empty(1, dtype=cupy.uint32)
    Q.launch_fp8_quant(x, q, scale, amax)
    q_ref, s_ref = Q.fp8_reference(x)
    assert float(scale[0]) == float(s_ref)
    assert_close(q, q_ref, dtype="exact", name=f"fp8 q {shape}")
    back = poisoned(shape, Q.BF16)
    Q.launch_fp8_dequant(q, scale, back)
    assert_close(back, Q.fp8_decode(q_ref) * s_ref, dtype="bfloat16", name=f"fp8 dequant {shape}")
    assert_close(back, x.astype(cupy.float32), tol=0.05, name=f"fp8 round trip {shape}")



@pytest.mark.parametrize("label", CONVERT_LABELS)
@pytest.mark.parametrize("words", [4, 4 * 777, 4 * 65536])
def test_int4_conversions_are_exact(label, words):
    import cupy
    from kernels import quant as Q
    from utils.check import assert_close, poisoned
    v = Q.CONVERT[label]
    vals = cupy.asarray(np.random.default_rng(SEED).integers(0, 16, words * 8, dtype=np.uint8))
    out = poisoned((words * 8,), np.float16 if label == "v3_magic_fp16" else Q.BF16)
    v(*v.prepare(vals), out, cupy.zeros(1, dtype=cupy.uint32))
    assert_close(out, vals.astype(cupy.float32), dtype="exact", name=f"{v.name} words={words} (seed {SEED})")


GEMV_SHAPES = [(128, 40), (384, 1008), (1152, 1000), (4224, 4104), (16384, 264), (8192, 8192)]


@pytest.mark.parametrize("label", GEMV_LABELS)
@pytest.mark.parametrize("K,N", GEMV_SHAPES)
def test_gemv_versions_match_the_reference(label, K, N):
    """Every instantiated config of every version; the split-K versions also at 1, 3 and the most splits."""
    from kernels import quant as Q
    from utils.check import assert_close, poison
    v = Q.GEMV[label]
    args, kw, ref = _gemv_case(K, N)
    problem = v.validate(*args, **kw)
    if not v.supports(problem):
        assert label == "v4_mma" and N % 16, v.why_not(problem)
        return
    split_choices = {"v2_pipelined": (None, 1, 3, K // 128), "v5_split": (None, 1, 3)}.get(label, (None,))
    for config in _configs(v, problem):
        for splits in split_choices:
            p = v.validate(*args, **kw, splits=splits)
            if not v.supports(p, config):
                continue
            poison(args[-1])
            v(*args, **kw, splits=splits, config=config)
            assert_close(args[-1], ref, dtype="bfloat16",
                         name=f"{v.name} {config} splits={splits} K={K} N={N} (seed {SEED})")


@pytest.mark.parametrize("label", ["v2_pipelined", "v5_split"])
def test_gemv_split_k_is_deterministic_and_repeatable(label):
    import cupy
    from kernels import quant as Q
    v = Q.GEMV[label]
    args, kw, _ = _gemv_case(4096, 4104)
    run = v.bind(*args, **kw, splits=8)
    run()
    first = args[-1].copy()
    for _ in range(5):                        # the counters are reset by the kernel: every launch equal
        run()
        assert cupy.array_equal(args[-1].view(cupy.uint16), first.view(cupy.uint16)), f"{v.name} (seed {SEED})"


@pytest.mark.parametrize("label,scale,shift", [(lab, s, 0.0) for lab in ("v1_magic", "v3_ring", "v5_split", "v6_tiled")
                                               for s in (1e-5, 1e4)]
                         + [("v4_mma", s, s) for s in (1e-3, 1.0, 300.0)])
def test_gemv_extreme_activations(label, scale, shift):
    """Tiny and large x: the bf16x2 sums keep both ends; for v4, x with a large mean and all-15 zero points
    stress the folded zero point - (128 + z) sum(x)."""
    import cupy
    from kernels import quant as Q
    from utils.check import assert_close, poisoned
    K, N = 2048, 256
    q, z, s = Q.random_int4_problem(K, N, seed=SEED)
    if label == "v4_mma":
        z = cupy.full_like(z, 15)
    qweight, qzeros = Q.pack_gptq(q, z)
    x = (_bf16_normal((1, K)).astype(cupy.float32) * scale + shift).astype(Q.BF16)
    out = poisoned((1, N), Q.BF16)
    v = Q.GEMV[label]
    v(x, qweight, qzeros, s, out, **v.prepare(qweight))
    assert_close(out, Q.gemv_reference(x, qweight, qzeros, s), dtype="bfloat16",
                 name=f"{v.name} |x| ~ {scale} + {shift} (seed {SEED})")


def test_gemv_rejects_partial_groups_on_the_device():
    import cupy
    from kernels import quant as Q
    with pytest.raises(ValueError, match="group size"):
        Q.GEMV[Q.BEST_GEMV](_bf16_normal((1, 200)), cupy.zeros((25, 64), cupy.int32), cupy.zeros((1, 8), cupy.int32),
                            cupy.zeros((1, 64), Q.BF16), cupy.zeros((1, 64), Q.BF16))


GEMM_MS = (1, 5, 16, 17, 32, 37, 48, 64)


@pytest.mark.parametrize("label", GEMM_LABELS)
@pytest.mark.parametrize("K,N", [(128, 48), (384, 272), (1152, 1040), (8192, 8192)])
def test_gemm_versions_match_the_reference(label, K, N):
    """Every M of GEMM_MS the version takes, at every config for its m16 tile count; v2/v4 at 1, 3 and the
    most K splits, v3 on its persistent grid and on 1 and 7 CTAs."""
    from kernels import quant as Q
    from utils.check import assert_close, poison
    v = Q.GEMM[label]
    extra = {"v2_marlin": [{}, {"splits": 1}, {"splits": 3}, {"splits": K // 128}],
             "v4_post": [{}, {"splits": 1}, {"splits": 3}, {"splits": K // 128}],
             "v3_stripe": [{}, {"ctas": 1}, {"ctas": 7}]}.get(label, [{}])
    for M in GEMM_MS:
        args, ref = _gemm_case(M, K, N, seed=SEED + M)
        problem = v.validate(*args)
        if not v.supports(problem):
            assert M > 48, v.why_not(problem)
            continue
        for config in _configs(v, problem):
            for kw in extra:
                if not v.supports(v.validate(*args, **kw), config):
                    continue
                poison(args[-1])
                v(*args, **kw, config=config)
                assert_close(args[-1], ref, dtype="bfloat16",
                             name=f"{v.name} {config} {kw} M={M} K={K} N={N} (seed {SEED + M})")


@pytest.mark.parametrize("label", ["v2_marlin", "v3_stripe", "v4_post"])
def test_gemm_split_reductions_are_deterministic(label):
    import cupy
    from kernels import quant as Q
    v = Q.GEMM[label]
    args, _ = _gemm_case(37, 4096, 1040)
    run = v.bind(*args, **({"ctas": 13} if label == "v3_stripe" else {"splits": 8}))
    run()
    first = args[-1].copy()
    for _ in range(5):
        run()
        assert cupy.array_equal(args[-1].view(cupy.uint16), first.view(cupy.uint16)), f"{v.name} (seed {SEED})"


@pytest.mark.parametrize("label", ["v1_mma", "v2_marlin", "v3_stripe", "v4_post"])
def test_gemm_rejects_what_it_cannot_take(label):
    from kernels import quant as Q
    from utils.version import Unsupported
    v = Q.GEMM[label]
    args, _ = _gemm_case(65, 256, 64)
    with pytest.raises(Unsupported, match="M <= "):
        v(*args)


# PyTorch's tinygemm as a peer: pack_tinygemm must hand it the same weights (up to the bf16 rounding of
# its zero = (8 - z) s), at M = 1 and an odd M, and reject mismatched group tensors.
@pytest.mark.parametrize("M,K,N", [(1, 1024, 256), (5, 8192, 1024)])
def test_pack_tinygemm_matches_the_reference(M, K, N):
    import cupy
    import torch
    from kernels import quant as Q
    from utils.arrays import as_torch, from_torch
    from utils.check import assert_close
    if not hasattr(torch, "_weight_int4pack_mm"):
        pytest.skip("this PyTorch build has no torch._weight_int4pack_mm")
    q, z, s = Q.random_int4_problem(K, N, seed=SEED)
    W = Q.dequantize_int4(q, s, z).astype(cupy.float32)
    a = _bf16_normal((M, K))
    w, sz = Q.pack_tinygemm(q, z, s)
    out = from_torch(torch._weight_int4pack_mm(as_torch(a), w, Q.GROUP, sz))
    assert_close(out, a.astype(cupy.float32) @ W, dtype="bfloat16", name=f"tinygemm M={M} K={K} N={N}")
    with pytest.raises(ValueError, match="expected shape"):
        Q.pack_tinygemm(q, z[:-1], s)


# The chapter's ladders: their cases, references and peers, and one version checked through the harness.
@pytest.mark.parametrize("which,shape", [("gemv", (1, 1024, 256)), ("gemm", (37, 1024, 256))])
def test_ladder_cases_references_and_peers(which, shape):
    import torch
    from kernels.quant import ladders
    from utils.check import assert_close
    lad = (ladders.gemv_ladder if which == "gemv" else ladders.gemm_ladder)(None, [shape], seed=SEED,
                                                                           tinygemm=hasattr(torch, "_weight_int4pack_mm"))
    case, ref, seed = lad.case(shape, "bfloat16", fresh_for="test")
    from utils.ladder import peer_output
    for impl, factory in lad.peers.items():
        assert_close(peer_output(factory(case)()), ref, dtype="bfloat16", name=f"{which} peer {impl} {shape} (seed {seed})")
    label = "v1_magic" if which == "gemv" else "v2_marlin"
    assert lad.check(label) >= 1


def test_mma_codes_on_the_device():
    import cupy
    from kernels import quant as Q
    from kernels.quant.ladders import mma_codes
    q, _, _ = Q.random_int4_problem(256, 48, seed=SEED)
    assert bool((mma_codes(Q.pack_mma(q)) == q).all()), f"seed {SEED}"
    assert isinstance(q, cupy.ndarray)
