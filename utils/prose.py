"""Prose bound to the run: measured figures reach the markdown through myst-nb ``glue``, and a sentence
that judges a result sits under a cell that asserts it.

In a code cell::

    glue("v4_bf16_65536_frac", frac, "{:.0%}")        # -> {glue:text}`v4_bf16_65536_frac` in markdown
    expect(v4 >= 0.9 * v3, "v4 keeps at least 90% of v3's bandwidth on every long row")

``glue`` writes the display data myst-nb's glue reader looks for (the same mimebundle and ``scrapbook``
metadata as ``myst_nb.glue``), hidden from the cell's visible output, so a GPU host needs no myst-nb.
The value is glued as its formatted text, so ``{glue:text}`name``` prints exactly what the cell's
format says. ``expect`` raises :class:`JudgementFailed` with the sentence when the relation does not
hold: a re-run that flips a judgement fails loudly instead of leaving the text wrong.
"""
from __future__ import annotations

GLUE_PREFIX = "application/papermill.record/"


class JudgementFailed(AssertionError):
    """A sentence of the chapter no longer holds for this run's figures."""

    def _render_traceback_(self):  # IPython: one line, the sentence
        return [f"{type(self).__name__}: {self}"]


class Text(str):
    """A string whose plain-text display is itself (no quotes), so glue:text shows it verbatim."""

    def __repr__(self) -> str:
        return str(self)


_glued: dict[str, str] = {}


def glue(name: str, value, fmt: str = "{}") -> None:
    """Glue ``fmt.format(value)`` under ``name`` for ``{glue:text}`name``` in markdown. A name glued twice
    keeps the last value, as myst-nb does. Returns None, so a cell that ends with a glue shows nothing
    (:func:`glued` reads the text back)."""
    if not name.replace("_", "").replace("-", "").isalnum():
        raise ValueError(f"glue name {name!r}: use letters, digits, '_' and '-'")
    text = fmt.format(value)
    _glued[name] = text
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:  # plain Python (tests, scripts): nothing to display into
        return
    if get_ipython() is not None:
        display({GLUE_PREFIX + "text/plain": repr(Text(text))}, raw=True,
                metadata={"scrapbook": {"name": name, "mime_prefix": GLUE_PREFIX}})


def glued(name: str) -> str:
    """The text last glued under ``name`` in this process."""
    try:
        return _glued[name]
    except KeyError:
        raise KeyError(f"nothing glued under {name!r}; glued so far: {sorted(_glued)}") from None


def glue_all(values: dict, fmt: str = "{}") -> None:
    """Glue several values with one format."""
    for name, value in values.items():
        glue(name, value, fmt)


BOOK_GPU = "H200"   # the GPU the book's text was written from (its stored run)


def on_book_gpu() -> bool:
    """True on the GPU the prose describes, not emulating another (BOOK_ARCH). Elsewhere (an H100, an A100,
    the A100 emulation) a judgement may honestly come out differently, and the reader gets a note."""
    from .gpu import device_summary, has_gpu
    if not has_gpu():
        return False
    d = device_summary()
    # BOOK_ARCH emulates another reader's GPU: its timings (PTX JIT-compiled for the H200) are not the run
    # the text describes, so it gets the notes another GPU would get.
    return BOOK_GPU in d["name"] and not d.get("emulated_arch")


def expect(condition: bool, sentence: str) -> None:
    """Assert a judgement the prose makes. ``sentence`` is the claim in plain English.

    On the book's GPU a judgement that no longer holds raises :class:`JudgementFailed` (a re-run must
    not leave the text wrong); on another GPU it prints one line saying the text's claim does not hold
    here, since the text describes the H200 run."""
    if bool(condition):
        return
    if on_book_gpu():
        raise JudgementFailed(f"the text says: {sentence!r}, but this run's figures do not support it")
    print(f"note: the text (written from an {BOOK_GPU} run) says {sentence!r}; on this GPU it does not hold.")


def reset() -> None:
    """Forget the names glued so far (a test's, or a notebook re-run in the same kernel)."""
    _glued.clear()
