"""Repository locations, resolved from this file so that notebooks may run from any directory."""
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
KERNELS = REPO / "kernels"
INCLUDE = KERNELS / "include"
RESULTS = REPO / "results"
CHAPTERS = REPO / "chapters"
