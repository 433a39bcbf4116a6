"""Chapter 16's capstone and the backward chapter's tables on the CPU: the capstone module imports without torch, its
corpus is the same for the same seed and has the structure it claims, its config and names are checked; the
ladder's byte model and tables read the record as the chapter needs."""
import subprocess
import sys

import numpy as np
import pytest

from kernels.attention_bwd import capstone as C
from kernels.attention_bwd import ladders as L
from utils.paths import REPO

SMALL = dict(vocab=64, seq_len=40, batch=3, steps=4, warmup_steps=1, topics=3, successors=4)


def test_imports_and_makes_a_corpus_without_torch():
    code = ("import sys; sys.modules['torch'] = None\n"
            "from kernels.attention_bwd import capstone as C\n"
            "c = C.make_corpus(C.Config(vocab=64, seq_len=8, batch=2, steps=2, warmup_steps=0))\n"
            "assert c.tokens.shape == (4, 9)\n"
            "try:\n    C.FlashAttention2Function\nexcept ImportError:\n    print('torch only on use')\n")
    run = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "torch only on use"


def test_corpus_is_the_same_for_the_same_seed():
    cfg = C.Config(**SMALL)
    a, b = C.make_corpus(cfg), C.make_corpus(cfg)
    np.testing.assert_array_equal(a.tokens, b.tokens)
    assert a.floor == b.floor
    other = C.make_corpus(C.Config(**{**SMALL, "seed": 17}))
    assert (other.tokens != a.tokens).any()
    assert a.tokens.shape == (cfg.steps * cfg.batch, cfg.seq_len + 1) and a.tokens.dtype == np.int32
    assert a.tokens.min() >= 0 and a.tokens.max() < cfg.vocab


def test_corpus_follows_one_chain_a_sequence():
    """Within a sequence every token has at most `successors` distinct next tokens (its chain's), and the loss
    floor lies between 0 and the entropy of a uniform choice among them."""
    cfg = C.Config(**{**SMALL, "seq_len": 600})
    c = C.make_corpus(cfg)
    for row in c.tokens:
        nxt = {}
        for a, b in zip(row[:-1], row[1:]):
            nxt.setdefault(int(a), set()).add(int(b))
        assert max(len(s) for s in nxt.values()) <= cfg.successors
    assert 0 < c.floor < np.log(cfg.successors)


@pytest.mark.parametrize("over, match", [
    (dict(d_model=500), "multiple of n_heads"),
    (dict(d_model=256, n_heads=8), "head dimension .* 32"),
    (dict(n_kv_heads=3), "multiple of n_kv_heads"),
    (dict(steps=10, warmup_steps=10), "warmup_steps"),
    (dict(successors=300), "successors"),
    (dict(lr=0.0), "learning rate"),
    (dict(batch=0), "Config.batch"),
    (dict(seq_len=2.5), "Config.seq_len"),
])
def test_config_rejects(over, match):
    with pytest.raises(ValueError, match=match):
        C.Config(**over)


def test_names_are_checked_before_torch_is_needed():
    with pytest.raises(ValueError, match="attention: expected one of"):
        C.attention_fn("flash")
    with pytest.raises(ValueError, match="backward must name one of"):
        C.flash_attention(None, None, None, backward="v2_fast")
    with pytest.raises(ValueError, match="attention: expected one of"):
        C.call_costs(C.Config(), "flash")
    with pytest.raises(ValueError, match="iters >= 1"):
        C.call_costs(C.Config(), "ours", iters=0)


def test_compare():
    runs = {"ours": {"loss": [3.0, 2.0, 1.5, 1.25]}, "sdpa": {"loss": [3.0, 2.5, 1.5, 1.0]}}
    got = C.compare(runs, last=2)
    assert got["max_diff_last"] == 0.25 and got["max_diff"] == 0.5
    assert got["mean_last"] == {"ours": 1.375, "sdpa": 1.25}
    with pytest.raises(ValueError, match="last"):
        C.compare(runs, last=5)


def test_minimum_bytes():
    # q, out, dout, dq: 4 bf16 per query row element; k, v, dk, dv: 4 per key row element; lse: fp32 per row
    assert L.nbytes((2, 4, 2, 10, 30, 64, 1)) == 2 * 64 * (4 * 2 * 4 * 10 + 4 * 2 * 2 * 30) + 4 * 2 * 4 * 10


def _ladder(tmp_path, entries):
    from kernels.attention_bwd import ATTN_BWD
    from utils.ladder import Ladder
    from utils.record import Record
    rec = Record("16-test", gpu="test-gpu", root=tmp_path)
    for impl, shape, ms in entries:
        rec.add("attn_bwd", impl, dtype="bfloat16", shape=shape, ms=ms, flops=L.cost(shape, None), is_peer="." in impl)
    return Ladder(rec, ATTN_BWD, shapes=[], dtypes=["bfloat16"], make=None, reference=None, flops=L.cost,
                  peers=L.PEERS, ceiling=None)


def test_tables_read_the_record(tmp_path):
    shapes = [s for c in (False, True) for s in L.bench_shapes(64, c, (2048,))]
    entries = [(impl, s, ms) for s in shapes for impl, ms in
               (("torch.sdpa.flash", 2.0), ("torch.sdpa.cudnn", 1.0), ("v0_atomic_dq", 2.5), ("v1_deterministic", 4.0))]
    entries += [(L.tile_impl(lab, t), s, (1.0 + i) * (1 + j)) for lab in ("v0_atomic_dq", "v1_deterministic")
                for i, t in enumerate(L.TILES[64]) for j, s in enumerate(shapes)]
    lad = _ladder(tmp_path, entries)
    bar = L.bar_table(lad, ["v0_atomic_dq", "v1_deterministic"], shapes)
    assert bar.column("configuration") == ["d64 full 2k", "d64 causal 2k"]
    assert bar.column("of flash")[:2] == ["0.80", "0.80"] and bar.rows[0][-2:] == ["0.50", "0.25"]
    sw = L.sweep_table(lad, shapes)
    assert len(sw.rows) == 2 * len(L.TILES[64]) and sw.columns[-3:] == ["full 2k", "causal 2k", "geomean"]
    smem = f"{L.dkdv_smem(64, L.TILES[64][0], True) / 1024:.0f}"
    assert sw.rows[0][:5] == ["v0_atomic_dq", "d64", "128 x 128", "8", smem]
    assert sw.rows[0][-3:] == ["2.00", "1.00", "1.41"] and sw.rows[1][-3:] == ["1.00", "0.50", "0.71"]
    led = L.ledger_table(shapes, 600.0, 4000.0)
    floor_us = L.cost(shapes[0], None) / 600e12 * 1e6
    assert led.rows[0][2] == f"{L.cost(shapes[0], None) / 1e9:,.0f}" and len(led.rows) == 2
    assert led.rows[0][5:] == [f"{floor_us:,.0f}", f"{floor_us * 1.4:,.0f}", f"{L.nbytes(shapes[0]) / 4e12 * 1e6:,.0f}"]
