#!/usr/bin/env bash
# fuzz.sh [seconds-per-target] [package-pattern]
#
# Runs every fuzz target of the workspace (every `func FuzzX(f *testing.F)`
# in a *_test.go file) with `go test -fuzz` for the given time each (default
# 60 s), one after another, and says which failed (and which ended in Go's own
# end-of-run error without a failing input: rerun those). A failing input is kept by
# Go under the package's testdata/fuzz/FuzzX/, where a plain `go test` (CI's
# short seed-corpus run) replays it: commit it with the fix.
#
# The optional second argument narrows the run to packages whose directory
# contains it (e.g. `scripts/fuzz.sh 120 libs/slurmspec`).
# LOOM_FUZZ_PARALLEL sets -parallel (default: go's, GOMAXPROCS).
set -euo pipefail

secs="${1:-60}"
only="${2:-}"
case "$secs" in
  ''|*[!0-9]*) echo "fuzz.sh: seconds-per-target must be a whole number, got '$secs'" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."

parallel=()
if [ -n "${LOOM_FUZZ_PARALLEL:-}" ]; then
  parallel=(-parallel "$LOOM_FUZZ_PARALLEL")
fi

# dir<TAB>FuzzName, sorted, one line per target.
targets=$(git ls-files '*_test.go' | xargs grep -H -E '^func Fuzz[A-Za-z0-9_]*\(' |
  sed -E 's#^(.*)/[^/]*_test\.go:func (Fuzz[A-Za-z0-9_]*)\(.*#\1\t\2#' | sort -u)
if [ -n "$only" ]; then
  targets=$(printf '%s\n' "$targets" | awk -F'\t' -v o="$only" 'index($1, o) > 0')
fi
if [ -z "$targets" ]; then
  echo "fuzz.sh: no fuzz targets found${only:+ under '$only'}" >&2
  exit 2
fi

n=$(printf '%s\n' "$targets" | wc -l)
echo "fuzz.sh: $n targets, ${secs}s each"
failed=()
flaked=()
# The inputs Go keeps for a target's failures, one path a line.
inputs() {
  if [ -d "$1/testdata/fuzz/$2" ]; then find "$1/testdata/fuzz/$2" -type f | sort; fi
}
while IFS=$'\t' read -r dir name; do
  echo "=== $dir $name (${secs}s)"
  before=$(inputs "$dir" "$name")
  if ! go test -run '^$' -fuzz "^${name}\$" -fuzztime "${secs}s" "${parallel[@]}" "./$dir"; then
    # A run that fails without writing an input is Go's own race at the
    # end of a timed run ("context deadline exceeded", golang/go#75804,
    # seen on loaded machines), not a finding: say so rather than fail.
    if [ "$(inputs "$dir" "$name")" = "$before" ]; then
      flaked+=("$dir $name")
    else
      failed+=("$dir $name")
    fi
  fi
done <<< "$targets"

if [ "${#flaked[@]}" -gt 0 ]; then
  echo "fuzz.sh: ${#flaked[@]} target(s) ended in error without a failing input (Go's end-of-run race, golang/go#75804; rerun them):" >&2
  printf '  %s\n' "${flaked[@]}" >&2
fi
if [ "${#failed[@]}" -gt 0 ]; then
  echo "fuzz.sh: ${#failed[@]} of $n targets failed:" >&2
  printf '  %s\n' "${failed[@]}" >&2
  echo "the failing inputs are under each package's testdata/fuzz/; fix the bug and commit them" >&2
  exit 1
fi
echo "fuzz.sh: $((n - ${#flaked[@]})) of $n targets passed"
