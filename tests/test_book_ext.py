"""_ext/book_ext.py's glue:text fix: myst-nb literal-evaluates glued text, which turned "3,955" into (3, 955)."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "_ext"))
book_ext = pytest.importorskip("book_ext")
pytest.importorskip("myst_nb")


@pytest.mark.parametrize("text,shown", [("3,955", "3,955"), ("1.00", "1.00"), ("+1.9%", "+1.9%"), ("9.5e-07", "9.5e-07"),
                                        ("'quoted'", "quoted"), ("落在预测之内", "落在预测之内"), ("(2, 3)", "(2, 3)")])
@pytest.mark.parametrize("spec", ["", "s"])                  # the role passes "s" when `key` has no ":spec"
def test_glued_text_is_shown_as_formatted(text, shown, spec):
    assert book_ext.glue_text_verbatim(text, spec) == shown


def test_a_format_spec_still_formats():
    assert book_ext.glue_text_verbatim("1.234", ".2f") == "1.23"


def test_the_roles_use_it():
    from myst_nb.ext.glue import crossref, roles
    book_ext.install_glue_text_verbatim()
    assert roles.format_plain_text is book_ext.glue_text_verbatim is crossref.format_plain_text
