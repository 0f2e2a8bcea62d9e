#!/usr/bin/env bash
# A first run of the same cells at two git refs, paired: for each of K rounds, `bench run` of the default matrix's
# cells that --where selects, in a new folder (so every probe is measured, as on a user's first run), first at REF_A
# and then at REF_B, each from a worktree of its ref with this checkout's .venv. Prints each run's wall time, the
# run's own probe line and each engine probe's line, then the two sides' median walls and their ratio.
#
#     benchmarks/first_run_refs.sh a7fda6a 904c6d3 --where model=tiny,gpus=2 --runs 2
#
# For changes to the control plane and the workers (models/), not to the set-up: both sides share .venv. Run from the
# repository root with nothing else running; docs/diagnose.md quotes its figures.
set -euo pipefail
say() { echo "first_run_refs: $*" >&2; }
[ $# -ge 2 ] || { say "usage: benchmarks/first_run_refs.sh REF_A REF_B [--where FILTER] [--runs K]"; exit 2; }
a=$1 b=$2; shift 2
where="gpus=2" runs=2
while [ $# -gt 0 ]; do
  case "$1" in
    --where) where=${2:?--where needs a filter}; shift 2 ;;
    --runs) runs=${2:-}; shift 2 || { say "--runs needs a count"; exit 2; } ;;
    *) say "unknown argument '$1' (--where FILTER, --runs K)"; exit 2 ;;
  esac
done
[[ "$runs" =~ ^[1-9][0-9]*$ ]] || { say "--runs must be a positive whole number, got '$runs'"; exit 2; }
root=$(git rev-parse --show-toplevel)
py="$root/.venv/bin/python"
[ -x "$py" ] || { say "no $py: run make install first"; exit 2; }
for ref in "$a" "$b"; do
  git -C "$root" rev-parse --verify -q "$ref^{commit}" >/dev/null || { say "'$ref' is not a commit here"; exit 2; }
done

work=$(mktemp -d /tmp/bench-first-run-refs-XXXXXX)
cleanup() {
  for side in a b; do git -C "$root" worktree remove --force "$work/$side" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
git -C "$root" worktree add -q --detach "$work/a" "$a"
git -C "$root" worktree add -q --detach "$work/b" "$b"

declare -A walls=([a]="" [b]="")
for ((k = 1; k <= runs; k++)); do
  for side in a b; do
    ref=$([ "$side" = a ] && echo "$a" || echo "$b")
    run="$work/run-$side-$k"
    mkdir -p "$run"
    cp "$root/matrix.yaml" "$run/"
    t0=$(date +%s.%N)
    rc=0
    (cd "$run" && PYTHONPATH="$work/$side" "$py" -m bench run matrix.yaml --where "$where" >out.txt 2>err.txt) || rc=$?
    t1=$(date +%s.%N)
    wall=$(awk -v s="$t0" -v e="$t1" 'BEGIN { printf "%.1f", e - s }')
    walls[$side]="${walls[$side]} $wall"
    echo "round $k $ref: wall $wall s, exit $rc | $(grep -h '^probes (compute' "$run/err.txt" || echo 'no probe line')"
    grep -hE '^probe .* engine' "$run/err.txt" | sed -E 's/^probe +//; s/\): .*/)/' | sed 's/^/    /' || true
  done
done
median() {
  tr ' ' '\n' | sed '/^$/d' | sort -g |
    awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'
}
ma=$(echo "${walls[a]}" | median) mb=$(echo "${walls[b]}" | median)
echo "median wall: $a $ma s, $b $mb s, ratio $(awk -v x="$mb" -v y="$ma" 'BEGIN { printf "%.3f", x / y }')"
