"""Repository locations, resolved from this file so that notebooks may run from any directory."""
import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
KERNELS = REPO / "kernels"
INCLUDE = KERNELS / "include"
# BOOK_RESULTS redirects the record, so that a verification pass (nbval) leaves the stored one alone.
RESULTS = Path(os.environ.get("BOOK_RESULTS") or REPO / "results")
CHAPTERS = REPO / "chapters"
