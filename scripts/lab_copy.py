"""Keep the reader's working copy of the chapters (lab/, ignored by git) in step with chapters/.

`make lab` runs this before it opens JupyterLab on lab/, so that Run All, autosave and experiments
change only the copies and never the notebooks the book is built from. For each chapters/*.ipynb:

- no copy yet: copy it;
- the chapter has not changed since it was copied: keep the copy, whatever the reader did to it;
- the chapter changed and the copy is as it was copied: replace the copy with the new chapter;
- the chapter changed and so did the copy (the reader ran or edited it): keep the copy and say so,
  unless --refresh, which first moves the reader's copy to lab/backup/ and then copies.

The hash of the chapter as last copied is kept in lab/.copied.json. Nothing is ever deleted.
Usage: python scripts/lab_copy.py [--refresh] [--chapters DIR] [--lab DIR]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MANIFEST = ".copied.json"


def file_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_manifest(lab: Path) -> dict[str, str]:
    path = lab / MANIFEST
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    if not isinstance(data, dict):
        raise ValueError(  # noqa: TRY004 (the book raises ValueError for bad input, CONTRIBUTING.md)
            f"{path}: expected a JSON object of file name -> sha256, got {type(data).__name__}")
    return data


def write_manifest(lab: Path, manifest: dict[str, str]) -> None:
    tmp = lab / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(dict(sorted(manifest.items())), indent=1) + "\n")
    tmp.replace(lab / MANIFEST)


def back_up(copy: Path, lab: Path) -> Path:
    """Move the reader's copy to lab/backup/<stem>.<UTC time>.ipynb (never over an earlier backup)."""
    folder = lab / "backup"
    folder.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = folder / f"{copy.stem}.{stamp}{copy.suffix}"
    n = 1
    while target.exists():
        target = folder / f"{copy.stem}.{stamp}-{n}{copy.suffix}"
        n += 1
    copy.replace(target)
    return target


def decide(source_hash: str, copy_hash: str | None, copied_hash: str | None) -> str:
    """What to do with one chapter: 'copy', 'keep', 'update' (copy unchanged, chapter new) or 'conflict'.

    ``copy_hash`` is None when there is no copy; ``copied_hash`` is None when the manifest has no entry.
    """
    if copy_hash is None:
        return "copy"
    if copy_hash == source_hash or copied_hash == source_hash:
        return "keep"
    if copied_hash is not None and copy_hash == copied_hash:
        return "update"
    return "conflict"


def sync(chapters: Path, lab: Path, *, refresh: bool = False, log=print) -> dict[str, str]:
    """Bring lab/ up to date with chapters/ by the rules above; returns {notebook name: action taken}."""
    if not chapters.is_dir():
        raise ValueError(f"expected a folder of chapter notebooks, got {chapters} (not a directory)")
    sources = sorted(chapters.glob("*.ipynb"))
    if not sources:
        raise ValueError(f"expected chapter notebooks (*.ipynb) in {chapters}, found none")
    lab.mkdir(parents=True, exist_ok=True)
    manifest = read_manifest(lab)
    actions = {}
    for src in sources:
        dst = lab / src.name
        source_hash = file_hash(src)
        action = decide(source_hash, file_hash(dst) if dst.exists() else None, manifest.get(src.name))
        if action == "conflict" and refresh:
            log(f"lab/{src.name}: your copy moved to lab/backup/{back_up(dst, lab).name}")
            action = "refresh"
        if action in ("copy", "update", "refresh"):
            shutil.copyfile(src, dst)
            manifest[src.name] = source_hash
        elif action == "keep" and file_hash(dst) == source_hash:
            manifest[src.name] = source_hash
        elif action == "conflict":
            log(f"lab/{src.name}: kept (you changed it, and chapters/{src.name} changed since it was "
                f"copied); `make lab REFRESH=1` moves your copy to lab/backup/ and copies the new chapter")
        actions[src.name] = action
    write_manifest(lab, manifest)
    return actions


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--refresh", action="store_true",
                    help="replace copies you changed whose chapter changed too (yours go to lab/backup/)")
    ap.add_argument("--chapters", type=Path, default=REPO / "chapters")
    ap.add_argument("--lab", type=Path, default=REPO / "lab")
    args = ap.parse_args(argv)
    actions = sync(args.chapters, args.lab, refresh=args.refresh)
    counts = {a: sum(1 for v in actions.values() if v == a) for a in sorted(set(actions.values()))}
    print(f"{args.lab}: " + ", ".join(f"{n} {a}" for a, n in counts.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
