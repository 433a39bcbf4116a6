"""Chapter 16's capstone on the GPU: FlashAttention2Function's output and gradients against PyTorch autograd through
scaled_dot_product_attention on float32 copies of the same bf16 inputs (odd lengths, GQA and MQA, causal or not,
inputs that are transposed views as a model makes them), with either backward version; and a short training run with
each attention from the same initialisation, whose losses agree. Skips without a GPU or torch."""
import zlib

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
SEED = 1690
# (B, Hq, Hkv, S, D, causal)
CASES = [(1, 1, 1, 3, 64, False), (1, 2, 2, 17, 64, True), (2, 8, 2, 333, 64, True), (1, 4, 1, 1000, 128, False),
         (1, 6, 3, 257, 128, True)]
IDS = ["B{}-Hq{}-Hkv{}-S{}-d{}-{}".format(*c[:5], "causal" if c[5] else "full") for c in CASES]


def _seed(*what) -> int:
    return (SEED * 1_000_003 + zlib.crc32(repr(what).encode())) % 2**31


@pytest.mark.parametrize("backward", ["v0_atomic_dq", "v1_deterministic"])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_gradients_match_sdpa_autograd(case, backward):
    torch = pytest.importorskip("torch")
    from torch.nn.functional import scaled_dot_product_attention

    from kernels.attention_bwd.capstone import flash_attention
    from utils.arrays import from_torch
    from utils.check import assert_close
    B, Hq, Hkv, S, D, causal = case
    seed = _seed(backward, case)
    g = torch.Generator(device="cuda").manual_seed(seed)
    # [B, S, heads, D] laid out as a projection writes them, viewed as [B, heads, S, D]: not contiguous
    qkv = torch.randn(B, S, Hq + 2 * Hkv, D, device="cuda", generator=g).bfloat16().transpose(1, 2)
    q, k, v = (t.detach().requires_grad_(True) for t in qkv.split([Hq, Hkv, Hkv], dim=1))
    dout = torch.randn(B, Hq, S, D, device="cuda", generator=g).bfloat16()
    out = flash_attention(q, k, v, causal=causal, backward=backward)
    got = torch.autograd.grad(out, (q, k, v), dout)
    q32, k32, v32 = (t.detach().float().requires_grad_(True) for t in (q, k, v))
    ref = scaled_dot_product_attention(q32, k32, v32, is_causal=causal, enable_gqa=Hq != Hkv)
    want = torch.autograd.grad(ref, (q32, k32, v32), dout.float())
    what = f"{backward} {case} (seed {seed})"
    assert_close(from_torch(out.detach()), from_torch(ref.detach()), dtype="bfloat16", name=f"{what}: out")
    for name, a, b in zip(("dq", "dk", "dv"), got, want):
        assert a.dtype == torch.bfloat16 and a.shape == b.shape
        assert_close(from_torch(a), from_torch(b), dtype="bfloat16", name=f"{what}: {name}")


def test_autocast_casts_to_bf16():
    """Under bf16 autocast, float32 inputs are cast on the way in, and the gradients come back as float32."""
    torch = pytest.importorskip("torch")
    from kernels.attention_bwd.capstone import flash_attention
    g = torch.Generator(device="cuda").manual_seed(_seed("autocast"))
    q, k, v = (torch.randn(1, 2, 65, 64, device="cuda", generator=g).requires_grad_(True) for _ in range(3))
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = flash_attention(q, k, v)
    assert out.dtype == torch.bfloat16
    out.float().sum().backward()
    assert q.grad.dtype == torch.float32 and bool(torch.isfinite(q.grad).all())


def test_short_training_runs_agree():
    """The same initialisation on the same batches with each attention: the loss falls, and the two per-step losses
    stay within 2% of each other (bf16 rounding differs between the kernels; nothing else does)."""
    pytest.importorskip("torch")
    from kernels.attention_bwd import capstone as C
    cfg = C.Config(d_model=256, n_heads=4, n_kv_heads=2, n_layers=2, seq_len=256, batch=16, steps=80,
                   warmup_steps=5, lr_warmup=10)
    corpus = C.make_corpus(cfg)
    runs = {name: C.train(cfg, name, corpus) for name in C.ATTENTIONS}
    for name, r in runs.items():
        assert len(r["loss"]) == cfg.steps and r["tokens_per_s"] > 0, name
        assert np.mean(r["loss"][-10:]) < r["loss"][0] - 0.3, f"{name}: the loss did not fall: {r['loss'][::10]}"
    cmp = C.compare(runs, last=cfg.steps)
    assert cmp["max_diff"] < 0.02 * min(cmp["mean_last"].values()), cmp


def test_call_costs_time_the_kernels_behind_a_spacer():
    """Both attentions at a small model's shape: host and GPU times are positive and the spacer outlasts the
    issuing (else the GPU time would include waiting for the host)."""
    pytest.importorskip("torch")
    from kernels.attention_bwd import capstone as C
    cfg = C.Config(d_model=256, n_heads=4, n_kv_heads=2, n_layers=2, seq_len=256, batch=16)
    for name in C.ATTENTIONS:
        c = C.call_costs(cfg, name, iters=5)
        assert 0 < c["gpu_us"] < 10_000 and 0 < c["host_us"] < c["spacer_us"], (name, c)
