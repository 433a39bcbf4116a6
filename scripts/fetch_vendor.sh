#!/usr/bin/env bash
# Fetch the third-party JavaScript the book needs to render offline, into DEST (default
# _static/vendor): mermaid (one self-contained UMD file) and MathJax 3 (its whole es5/ tree:
# tex-chtml.js loads its output, font and extension files relative to itself).
#
#   scripts/fetch_vendor.sh [DEST]
#
# Uses the npm registry through `npm pack`, so no node_modules and no install scripts. Idempotent:
# DEST is rebuilt from scratch each time, through a temporary directory, so an interrupted run
# never leaves a half-filled DEST behind. Fails loudly on any missing tool or file.
set -euo pipefail

MERMAID_SPEC=${MERMAID_SPEC:-mermaid@12}
MATHJAX_SPEC=${MATHJAX_SPEC:-mathjax@3}
DEST=${1:-_static/vendor}

die() { echo "fetch_vendor: $*" >&2; exit 1; }
command -v npm >/dev/null || die "npm not found; install it (Debian: apt-get install -y npm) and retry"
command -v tar >/dev/null || die "tar not found"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "fetch_vendor: npm pack $MERMAID_SPEC $MATHJAX_SPEC"
(cd "$work" && npm pack --silent "$MERMAID_SPEC" "$MATHJAX_SPEC" >packed.txt) \
  || die "npm pack failed (is the npm registry reachable?)"
mermaid_tgz=$(grep -m1 '^mermaid-.*\.tgz$' "$work/packed.txt") || die "npm pack gave no mermaid tarball"
mathjax_tgz=$(grep -m1 '^mathjax-.*\.tgz$' "$work/packed.txt") || die "npm pack gave no mathjax tarball"

mkdir -p "$work/mermaid" "$work/mathjax" "$work/out"
tar xzf "$work/$mermaid_tgz" -C "$work/mermaid"
tar xzf "$work/$mathjax_tgz" -C "$work/mathjax"

mm="$work/mermaid/package/dist/mermaid.min.js"
mj="$work/mathjax/package/es5"
[ -s "$mm" ] || die "$mermaid_tgz has no package/dist/mermaid.min.js"
[ -s "$mj/tex-chtml.js" ] || die "$mathjax_tgz has no package/es5/tex-chtml.js"
[ -d "$mj/output/chtml/fonts" ] || die "$mathjax_tgz has no package/es5/output/chtml/fonts"

cp "$mm" "$work/out/mermaid.min.js"
cp -R "$mj" "$work/out/mathjax"
for pkg in mermaid mathjax; do   # keep the licences next to the code
  cp "$work/$pkg/package/LICENSE" "$work/out/LICENSE.$pkg" 2>/dev/null || true
done
{
  echo "${mermaid_tgz%.tgz}"
  echo "${mathjax_tgz%.tgz}"
} >"$work/out/VERSIONS"

# Replace DEST in one step: parent directory first, then swap.
mkdir -p "$(dirname "$DEST")"
rm -rf "$DEST.tmp"
mv "$work/out" "$DEST.tmp"
rm -rf "$DEST"
mv "$DEST.tmp" "$DEST"
echo "fetch_vendor: $(tr '\n' ' ' <"$DEST/VERSIONS")-> $DEST ($(du -sh "$DEST" | cut -f1))"
