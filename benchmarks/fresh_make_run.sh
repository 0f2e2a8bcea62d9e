#!/usr/bin/env bash
# `make run` as a new user's first one, timed: a clone of this checkout's HEAD in an empty folder, with empty caches
# (XDG_CACHE_HOME points at a new folder: pip downloads again and both Horovod builds compile from source, no cached
# wheel), then `make run` to the report. What it cannot make fresh: the Debian packages already installed on this
# machine (the set-up's "system packages" phase then reads 0 s; on a machine without them apt adds its own time) and
# this machine's local package folders that pip reads (its pip config), which a fresh machine of the same kind has too.
#
#   benchmarks/fresh_make_run.sh --out /tmp/fresh-run [--ref HEAD] [--keep]
#
# Writes OUT/make-run.log (everything make printed), OUT/time.txt (wall, user, sys) and OUT/split.txt: the set-up's
# phases (scripts/install.sh says them), the cells' and probes' time (bench run's summary lines) and the report's.
# Without --keep the clone and its caches are removed at the end (they are ~3 GB).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out="" ref=HEAD keep=0
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=${2:?--out needs a folder}; shift 2 ;;
    --ref) ref=${2:?--ref needs a git ref}; shift 2 ;;
    --keep) keep=1; shift ;;
    *) echo "fresh_make_run.sh: unknown argument '$1' (use --out DIR [--ref REF] [--keep])" >&2; exit 2 ;;
  esac
done
[ -n "$out" ] || { echo "fresh_make_run.sh: --out DIR is required" >&2; exit 2; }
git -C "$here" rev-parse --verify -q "$ref^{commit}" >/dev/null \
  || { echo "fresh_make_run.sh: --ref '$ref' is not a commit of $here" >&2; exit 2; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d /tmp/bench-fresh-XXXXXX)
[ "$keep" = 1 ] || trap 'rm -rf "$work"' EXIT
git clone -q --no-local "$here" "$work/bench"
git -C "$work/bench" checkout -q "$(git -C "$here" rev-parse "$ref")"
mkdir -p "$work/cache"
echo "clone of $(git -C "$work/bench" rev-parse --short HEAD) in $work/bench, caches in $work/cache" >&2
start=$(date +%s)
set +e
( cd "$work/bench" && env XDG_CACHE_HOME="$work/cache" /usr/bin/time -f "wall %e s, user %U s, sys %S s" \
    -o "$out/time.txt" make run ) >"$out/make-run.log" 2>&1
code=$?
set -e
took=$(( $(date +%s) - start ))
{
  echo "make run: exit $code, ${took} s ($(( took / 60 )) min $(( took % 60 )) s) from a fresh clone with empty caches"
  cat "$out/time.txt"
  grep -E '^\[install\] set-up|^\[horovod\] building' "$out/make-run.log" || true
  grep -E '^(compute probes|engine probes|probes|run [0-9T]+Z)' "$out/make-run.log" || true
  grep -E 'cells [0-9:]+ ETA' "$out/make-run.log" | tail -n 1 | sed 's/.*━ *//' || true
} >"$out/split.txt"
cat "$out/split.txt"
exit "$code"
