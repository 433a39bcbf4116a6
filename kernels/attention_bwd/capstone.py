"""Chapter 16's capstone: our FlashAttention-2 forward and backward as a ``torch.autograd.Function``, and a tiny
decoder-only transformer trained with it and with PyTorch's SDPA from the same initialisation on the same batches.

- :func:`flash_attention` (``FlashAttention2Function.apply``): causal or full attention of q ``[B, Hq, S, D]`` and
  k, v ``[B, Hkv, S, D]``, bf16 CUDA tensors. The forward is ``ATTN_FWD["v4_tuned"]`` and saves ``out`` and ``lse``;
  the backward is ``ATTN_BWD[backward]`` (default the deterministic version). The tensors are shared with CuPy
  without copies (:func:`utils.arrays.from_torch`) and the kernels run on torch's current stream.
- :class:`Config`, :func:`make_corpus`: the model's sizes and a synthetic corpus drawn from a seed. Each sequence
  follows one of ``topics`` random Markov chains (every token has ``successors`` possible next tokens); a model
  predicts well only once it has told the topic from the context, which takes attention.
- :func:`train`: the same initialisation trained on the same batches with one attention; per-step loss and tokens/s
  (CUDA events, the first ``warmup_steps`` left out), returned as plain Python data.

Importing this module needs neither torch nor CuPy: the torch classes are made on first use.
"""
from __future__ import annotations

import dataclasses
import functools
import time

import numpy as np

FORWARD = "v4_tuned"                  # ATTN_FWD's version
DEFAULT_BACKWARD = "v1_deterministic"  # ATTN_BWD's version: bit-reproducible gradients
ATTENTIONS = ("ours", "sdpa")         # what train() takes: ours, or PyTorch SDPA's FlashAttention-2 backend


# --- the model's sizes and the corpus ----------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Config:
    """The model, the corpus and the run. Defaults: about 30 s for two runs on an H200."""
    vocab: int = 256
    d_model: int = 512
    n_layers: int = 4
    n_heads: int = 8
    n_kv_heads: int = 2               # GQA: 4 query heads share each key/value head
    seq_len: int = 1024
    batch: int = 16
    steps: int = 300
    warmup_steps: int = 10            # left out of tokens/s: compilation, allocator and cuBLAS warm-up
    lr: float = 1e-3
    lr_warmup: int = 30               # linear learning-rate warm-up, then constant
    topics: int = 8                   # the corpus: Markov chains, one per sequence
    successors: int = 8               # next tokens each token may have in a chain
    seed: int = 16

    def __post_init__(self):
        for name in ("vocab", "d_model", "n_layers", "n_heads", "n_kv_heads", "seq_len", "batch", "steps",
                     "lr_warmup", "topics", "successors"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Config.{name}: expected a positive integer, got {value!r}")
        if self.d_model % self.n_heads:
            raise ValueError(f"Config: d_model = {self.d_model} must be a multiple of n_heads = {self.n_heads}")
        from kernels.attention import HEAD_DIMS
        if self.head_dim not in HEAD_DIMS:
            raise ValueError(f"Config: head dimension d_model / n_heads = {self.head_dim} must be one of {HEAD_DIMS} "
                             f"(what our kernels are built for)")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"Config: n_heads = {self.n_heads} must be a multiple of n_kv_heads = "
                             f"{self.n_kv_heads} (GQA)")
        if not 0 <= self.warmup_steps < self.steps:
            raise ValueError(f"Config: warmup_steps = {self.warmup_steps} must lie in [0, steps = {self.steps}), so "
                             f"that some steps are timed")
        if self.successors > self.vocab:
            raise ValueError(f"Config: successors = {self.successors} cannot exceed vocab = {self.vocab}")
        if not self.lr > 0:
            raise ValueError(f"Config.lr: expected a positive learning rate, got {self.lr!r}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def tokens_per_step(self) -> int:
        return self.batch * self.seq_len


@dataclasses.dataclass(frozen=True)
class Corpus:
    """``tokens [steps * batch, seq_len + 1]`` int32 (batch i is rows i * batch ...; inputs are a row's first
    seq_len tokens, targets its last), and ``floor``: the generator's own mean loss with the topic known, which no
    model beats on average (a model must first tell the topic from the context)."""
    tokens: np.ndarray
    floor: float


def make_corpus(cfg: Config) -> Corpus:
    """The corpus of ``cfg``, the same for the same seed: each chain gives every token ``successors`` distinct next
    tokens with Dirichlet(1) probabilities; each sequence draws a chain and a first token, then walks."""
    rng = np.random.default_rng(cfg.seed)
    T, V, K = cfg.topics, cfg.vocab, cfg.successors
    nxt = np.argsort(rng.random((T, V, V)), axis=-1)[..., :K]          # [T, V, K] distinct next tokens
    cum = rng.dirichlet(np.ones(K), size=(T, V)).cumsum(axis=-1)       # [T, V, K] cumulative probabilities
    n = cfg.steps * cfg.batch
    topic = rng.integers(0, T, n)
    tokens = np.empty((n, cfg.seq_len + 1), np.int32)
    tokens[:, 0] = rng.integers(0, V, n)
    nll = 0.0
    for t in range(cfg.seq_len):
        c = cum[topic, tokens[:, t]]                                   # [n, K]
        j = np.minimum((rng.random(n)[:, None] >= c).sum(axis=1), K - 1)
        p = c[np.arange(n), j] - np.where(j > 0, c[np.arange(n), j - 1], 0.0)
        tokens[:, t + 1] = nxt[topic, tokens[:, t], j]
        nll -= float(np.log(p).sum())
    return Corpus(tokens, nll / (n * cfg.seq_len))


# --- torch: the autograd function and the model, made on first use ------------------------------------------

@functools.cache
def _torch_parts():
    import torch
    import torch.nn.functional as F
    from torch import nn

    from kernels.attention import ATTN_FWD
    from kernels.attention_bwd import ATTN_BWD
    from utils.arrays import from_torch

    def run_on_torch_stream(version, *tensors, **kw):
        """Call a version on CuPy views of ``tensors`` (no copies), launched on torch's current stream."""
        import cupy
        with cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
            version(*(from_torch(t.detach()) for t in tensors), **kw)

    class FlashAttention2Function(torch.autograd.Function):
        """out = softmax(scale q k^T + mask) v with our kernels; gradients for q, k and v."""

        @staticmethod
        @torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.bfloat16)
        def forward(ctx, q, k, v, causal=True, scale=None, backward=DEFAULT_BACKWARD):
            q, k, v = (x.contiguous() for x in (q, k, v))
            out = torch.empty_like(q)
            lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
            run_on_torch_stream(ATTN_FWD[FORWARD], q, k, v, out, lse, causal=causal, scale=scale)
            ctx.save_for_backward(q, k, v, out, lse)
            ctx.causal, ctx.scale, ctx.version = causal, scale, backward
            return out

        @staticmethod
        @torch.amp.custom_bwd(device_type="cuda")
        def backward(ctx, dout):
            q, k, v, out, lse = ctx.saved_tensors
            dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
            run_on_torch_stream(ATTN_BWD[ctx.version], q, k, v, out, lse, dout.contiguous(), dq, dk, dv,
                                causal=ctx.causal, scale=ctx.scale)
            return dq, dk, dv, None, None, None

    class Block(nn.Module):
        """Pre-norm: x + attention(norm(x)), then x + MLP(norm(x))."""

        def __init__(self, cfg: Config, attend):
            super().__init__()
            self.cfg, self.attend = cfg, attend
            self.norm1, self.norm2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
            self.qkv = nn.Linear(cfg.d_model, (cfg.n_heads + 2 * cfg.n_kv_heads) * cfg.head_dim, bias=False)
            self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
            self.mlp = nn.Sequential(nn.Linear(cfg.d_model, 4 * cfg.d_model, bias=False), nn.GELU(),
                                     nn.Linear(4 * cfg.d_model, cfg.d_model, bias=False))

        def forward(self, x):                                          # x [B, S, d_model]
            B, S, _ = x.shape
            H, Hkv, D = self.cfg.n_heads, self.cfg.n_kv_heads, self.cfg.head_dim
            heads = self.qkv(self.norm1(x)).view(B, S, H + 2 * Hkv, D).transpose(1, 2)   # [B, H + 2 Hkv, S, D]
            q, k, v = heads.split([H, Hkv, Hkv], dim=1)
            y = self.attend(q, k, v)                                   # [B, H, S, D]
            x = x + self.proj(y.transpose(1, 2).reshape(B, S, H * D))
            return x + self.mlp(self.norm2(x))

    class TinyDecoder(nn.Module):
        """Token and position embeddings, n_layers blocks, a final norm and the output head; N(0, 0.02) weights."""

        def __init__(self, cfg: Config, attend):
            super().__init__()
            self.embed, self.pos = nn.Embedding(cfg.vocab, cfg.d_model), nn.Embedding(cfg.seq_len, cfg.d_model)
            self.blocks = nn.ModuleList(Block(cfg, attend) for _ in range(cfg.n_layers))
            self.norm, self.head = nn.LayerNorm(cfg.d_model), nn.Linear(cfg.d_model, cfg.vocab, bias=False)
            for p in self.parameters():
                if p.dim() == 2:
                    nn.init.normal_(p, std=0.02)

        def forward(self, tokens):                                     # tokens [B, S] -> logits [B, S, vocab]
            x = self.embed(tokens) + self.pos.weight[:tokens.shape[1]]
            for block in self.blocks:
                x = block(x)
            return self.head(self.norm(x))

    def sdpa(q, k, v):
        from torch.nn.attention import SDPBackend, sdpa_kernel
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=q.shape[1] != k.shape[1])

    return FlashAttention2Function, TinyDecoder, sdpa


def __getattr__(name):                 # FlashAttention2Function and TinyDecoder import torch when first asked for
    if name == "FlashAttention2Function":
        return _torch_parts()[0]
    if name == "TinyDecoder":
        return _torch_parts()[1]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def flash_attention(q, k, v, causal: bool = True, scale: float | None = None, backward: str = DEFAULT_BACKWARD):
    """Our attention on torch tensors, differentiable: q [B, Hq, S, D], k, v [B, Hkv, S, D] (bf16, or cast to bf16
    under autocast), on the GPU. ``backward`` names the ATTN_BWD version."""
    from kernels.attention_bwd import ATTN_BWD
    if backward not in ATTN_BWD:
        raise ValueError(f"flash_attention: backward must name one of {list(ATTN_BWD)}, got {backward!r}")
    return _torch_parts()[0].apply(q, k, v, causal, scale, backward)


def attention_fn(name: str, backward: str = DEFAULT_BACKWARD):
    """The causal attention a block calls, (q, k, v) -> [B, Hq, S, D]: ``"ours"`` (:func:`flash_attention`) or
    ``"sdpa"`` (PyTorch's FlashAttention-2 backend, GQA through ``enable_gqa``)."""
    if name == "ours":
        return functools.partial(flash_attention, causal=True, backward=backward)
    if name == "sdpa":
        return _torch_parts()[2]
    raise ValueError(f"attention: expected one of {ATTENTIONS}, got {name!r}")


# --- training ---------------------------------------------------------------------------------------------

def _mark(torch, device: str):
    """A point in time: a recorded CUDA event on the GPU, the wall clock elsewhere."""
    if device != "cuda":
        return time.perf_counter()
    event = torch.cuda.Event(enable_timing=True)
    event.record()
    return event


def _seconds(start, end) -> float:
    if isinstance(end, float):
        return end - start
    end.synchronize()
    return start.elapsed_time(end) / 1e3


def train(cfg: Config, attention, corpus: Corpus | None = None, *, backward: str = DEFAULT_BACKWARD,
          device: str = "cuda") -> dict:
    """Train a fresh :class:`TinyDecoder` (seeded by ``cfg.seed``: the same initialisation whatever the attention)
    on the corpus's batches in order, under bf16 autocast with AdamW. ``attention``: a name in ATTENTIONS or a
    callable ``(q, k, v) -> out``. Returns {"attention", "loss": per-step losses, "ms_per_step", "tokens_per_s"}; the
    losses are read back once, at the end, so that no step waits for the host."""
    import torch
    import torch.nn.functional as F
    corpus = make_corpus(cfg) if corpus is None else corpus
    attend = attention_fn(attention, backward) if isinstance(attention, str) else attention
    torch.manual_seed(cfg.seed)
    model = _torch_parts()[1](cfg, attend).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.0)
    tokens = torch.from_numpy(corpus.tokens).to(device)
    losses = torch.empty(cfg.steps, device=device)
    start = None
    for step in range(cfg.steps):
        if step == cfg.warmup_steps:
            start = _mark(torch, device)
        for group in opt.param_groups:
            group["lr"] = cfg.lr * min(1.0, (step + 1) / cfg.lr_warmup)
        batch = tokens[step * cfg.batch:(step + 1) * cfg.batch].long()
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, cfg.vocab), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses[step] = loss.detach()
    seconds = _seconds(start, _mark(torch, device))
    timed = cfg.steps - cfg.warmup_steps
    return {"attention": attention if isinstance(attention, str) else getattr(attention, "__name__", "custom"),
            "loss": [float(x) for x in losses.tolist()], "ms_per_step": 1e3 * seconds / timed,
            "tokens_per_s": timed * cfg.tokens_per_step / seconds}


def compare(runs: dict, last: int = 50) -> dict:
    """What the chapter says of two runs {name: train(...) result}: the largest |difference| of their per-step
    losses over the last ``last`` steps and over all, and the mean loss of the last steps of each."""
    (a, ra), (b, rb) = runs.items()
    diff = np.abs(np.asarray(ra["loss"]) - np.asarray(rb["loss"]))
    if not 0 < last <= diff.size:
        raise ValueError(f"compare: last must lie in [1, {diff.size}], got {last}")
    return {"max_diff_last": float(diff[-last:].max()), "max_diff": float(diff.max()),
            "mean_last": {a: float(np.mean(ra["loss"][-last:])), b: float(np.mean(rb["loss"][-last:]))}}


# --- where a training step's time goes ---------------------------------------------------------------------------

SPACER_MATMULS = 4                     # 8192^2 bf16 products queued before each timed call: about 6 ms of GPU work


def call_costs(cfg: Config, attention, *, backward: str = DEFAULT_BACKWARD, iters: int = 20, warmup: int = 3) -> dict:
    """One layer's attention, forward and backward, at the model's shape, with q, k and v strided views of one
    projection as :class:`Block` makes them: {"host_us": the Python time to issue it, "gpu_us": the GPU time of its
    kernels, "spacer_us"}, medians of ``iters`` calls. Each call is issued while the GPU still works through a
    spacer (SPACER_MATMULS matrix products), so its kernels are all queued by the time the GPU reaches them: the
    events around the call then time the kernels alone, and perf_counter times the host. The spacer must outlast the
    issuing (``spacer_us`` > ``host_us``), or the GPU time would include waiting for the host."""
    if iters < 1 or warmup < 0:
        raise ValueError(f"call_costs: expected iters >= 1 and warmup >= 0, got {iters} and {warmup}")
    attend = attention_fn(attention, backward) if isinstance(attention, str) else attention
    import torch
    gen = torch.Generator(device="cuda").manual_seed(cfg.seed)
    B, S, H, Hkv, D = cfg.batch, cfg.seq_len, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    heads = torch.randn(B, S, H + 2 * Hkv, D, device="cuda", dtype=torch.bfloat16, generator=gen).transpose(1, 2)
    dout = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, generator=gen)
    spacer = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16, generator=gen)

    def forward_backward():
        leaf = heads.detach().requires_grad_(True)
        q, k, v = leaf.split([H, Hkv, Hkv], dim=1)
        attend(q, k, v).backward(dout)

    def busy():
        for _ in range(SPACER_MATMULS):
            spacer @ spacer

    host, gpu = [], []
    for i in range(warmup + iters):
        busy()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        t0 = time.perf_counter()
        forward_backward()
        t1 = time.perf_counter()
        end.record()
        end.synchronize()
        if i >= warmup:
            host.append((t1 - t0) * 1e6)
            gpu.append(start.elapsed_time(end) * 1e3)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    busy()
    end.record()
    end.synchronize()
    return {"host_us": float(np.median(host)), "gpu_us": float(np.median(gpu)),
            "spacer_us": start.elapsed_time(end) * 1e3}
