import matplotlib
import pytest

matplotlib.use("Agg")

from utils.record import make_entry  # noqa: E402
from utils.roofline import bandwidth_bars, roofline  # noqa: E402


def _gemm(impl, n, ms, peer=False):
    return make_entry(chapter="02", op="gemm", impl=impl, dtype="bfloat16", shape=(n, n, n), ms=ms, run="r",
                      flops=2.0 * n ** 3, nbytes=6 * n * n, is_peer=peer)


def test_roofline_labels_do_not_overlap():
    pts = [_gemm("cublas_bf16", 8192, 1.6, True), _gemm("cublas_bf16", 4096, 0.17, True),
           _gemm("mine", 4096, 0.2)]
    ax = roofline(pts, {"copy": 4200, "cublas_bf16": 800}, title="t")
    texts = [t for t in ax.texts if "x" in t.get_text() or "mine" in t.get_text()]
    ax.figure.canvas.draw()
    from matplotlib.text import Text
    boxes = [Text.get_window_extent(t) for t in ax.texts if t.get_text() in   # the text, not its leader line
             ("cublas_bf16 8192x8192x8192 (peer)", "cublas_bf16 4096x4096x4096 (peer)", "mine")]
    assert len(boxes) == 3 and texts
    for i in range(3):
        for j in range(i + 1, 3):
            assert not boxes[i].overlaps(boxes[j])


def test_roofline_needs_flops_and_bytes():
    e = make_entry(chapter="04", op="copy", impl="c", dtype="float32", shape=(4,), ms=1.0, run="r", nbytes=8)
    with pytest.raises(ValueError, match="FLOP and a byte count"):
        roofline([e], {"copy": 1.0})
    ax = bandwidth_bars([e], copy_gbps=1e-5)
    assert len(ax.patches) == 1


def test_labels_tell_apart_ops_and_shapes():
    from utils.roofline import _labels
    a = make_entry(chapter="9", op="gemv", impl="cublas_bf16", dtype="b", shape=(1, 8), ms=1.0, run="r",
                   nbytes=1, is_peer=True)
    b = make_entry(chapter="9", op="gemm", impl="cublas_bf16", dtype="b", shape=(16, 8), ms=1.0, run="r",
                   nbytes=1, is_peer=True)
    c = make_entry(chapter="9", op="gemm", impl="cublas_bf16", dtype="b", shape=(32, 8), ms=1.0, run="r",
                   nbytes=1, is_peer=True)
    assert _labels([a, b, c]) == ["gemv: cublas_bf16 (peer)", "gemm: cublas_bf16 16x8 (peer)",
                                  "gemm: cublas_bf16 32x8 (peer)"]


def test_roofline_has_a_legend_per_series_and_tags_attached_to_points():
    pts = []
    for M, ms in ((1, 0.02), (16, 0.03), (64, 0.05)):
        for impl, peer in (("v2_marlin", False), ("cublas_bf16", True)):
            e = make_entry(chapter="9", op="w4a16", impl=impl, dtype="bfloat16", shape=(M, 8192, 8192), ms=ms,
                           run="r", flops=2.0 * M * 8192 ** 2, nbytes=(2 if peer else 0.5) * 8192 ** 2, is_peer=peer)
            pts.append(dict(e, series=impl + (" (peer)" if peer else ""), tag=f"M={M}"))
    ax = roofline(pts, {"copy": 4200, "cublas_bf16": 700})
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["v2_marlin", "cublas_bf16 (peer)"]
    tags = [t for t in ax.texts if t.get_text().startswith("M=")]
    assert len(tags) == 6 and all(t.arrow_patch is not None for t in tags)   # each tag has a leader line
    from utils.plot import PEER_COLORS
    assert ax.lines[-1].get_color() == PEER_COLORS[0]                        # the peer is grey
