import matplotlib
import pytest

matplotlib.use("Agg")

from utils import plot as P  # noqa: E402


def test_versions_and_peers_never_share_a_colour():
    styles = P.series_styles([f"v{i}" for i in range(12)] + ["torch.softmax", "torch.compile"],
                             peers=["torch.softmax", "torch.compile"])
    version_colors = {styles[f"v{i}"]["color"] for i in range(12)}
    assert len(version_colors) == 12                                  # 12 versions, 12 colours
    assert styles["torch.softmax"]["color"] not in version_colors
    assert styles["torch.softmax"]["linestyle"] == "--"
    assert styles["torch.softmax"]["color"] != styles["torch.compile"]["color"]


def test_figure_is_column_wide_with_2d_axes_and_grid_shape_wraps():
    fig, axes = P.figure(2, 3)
    assert axes.shape == (2, 3) and fig.get_size_inches()[0] == pytest.approx(P.COLUMN_IN)
    assert P.grid_shape(10, cols=4) == (3, 4) and P.grid_shape(2) == (1, 2)
    with pytest.raises(ValueError, match="at least one panel"):
        P.grid_shape(0)


def test_apply_style_sets_readable_fonts_at_the_column_width():
    P.apply_style()
    assert matplotlib.rcParams["font.size"] >= 10 and matplotlib.rcParams["figure.dpi"] == P.DPI
    assert matplotlib.rcParams["figure.figsize"][0] == P.COLUMN_IN


def test_label_points_attaches_each_label_with_a_leader_line():
    _, axes = P.figure()
    ax = axes[0, 0]
    P.label_points(ax, [1, 2], [3, 4], ["a", "b"])
    P.ceiling_line(ax, 5, "copy")
    assert [t.get_text() for t in ax.texts] == ["a", "b", "copy"]
    assert ax.texts[0].arrow_patch is not None
