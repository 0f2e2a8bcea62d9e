"""False-alarm and detection rates of `bench check` on recorded runs (docs/regression-checks.md).

    .venv/bin/python ci/false_alarms.py STORE [--slow STORE ...] [--pool 3] [--normalize ratio-to:gpus=1]
                                         [--min-effect 0.05 0.1 ...]

Every run in STORE is a run of the unchanged tree. Each way of choosing `--pool` runs as the baseline (pooled, as
`bench baseline save --run A --run B --run C` does) and one other run as the candidate is one check; a check is a
false alarm when any cell is `regressed`. Runs in `--slow` (a tree with a known slowdown) are checked against every
baseline too: the share flagged is the detection rate. Same functions as `bench check`.
"""
from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.analysis.regress import CheckSettings, compare, normalize_ratio_to, observations  # noqa: E402
from bench.commands.check import parse_normalize  # noqa: E402
from bench.store import Store  # noqa: E402


def runs_of(path: str):
    with Store(path, create=False) as store:
        df = store.dataframe()
        finished = {r["run_id"] for r in store.runs() if r["finished_unix"]}
    df = df[df["run_id"].isin(finished)]  # a run still going is not a candidate yet
    return {run_id: observations(g) for run_id, g in df.groupby("run_id", sort=True)}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("store")
    p.add_argument("--slow", nargs="*", default=[])
    p.add_argument("--pool", type=int, default=3)
    p.add_argument("--normalize", default="ratio-to:gpus=1")
    p.add_argument("--min-effect", type=float, nargs="+", default=[0.05, 0.10, 0.15, 0.20, 0.25, 0.30])
    args = p.parse_args()
    selector = parse_normalize(args.normalize)
    norm = (lambda o: normalize_ratio_to(o, selector)) if selector else (lambda o: o)
    same = {r: norm(o) for r, o in runs_of(args.store).items()}
    slow = {r: norm(o) for path in args.slow for r, o in runs_of(path).items()}
    import pandas as pd

    names = sorted(same)
    pools = list(itertools.combinations(names, args.pool))
    print(f"{len(names)} unchanged runs, {len(slow)} slowed runs, {len(pools)} baselines of {args.pool} runs")
    for effect in args.min_effect:
        settings = CheckSettings(min_effect=effect)
        alarms = checks = caught = slow_checks = 0
        # With a retry: the check fails only if the next run (in time) is flagged too.
        alarms2 = checks2 = caught2 = slow_checks2 = 0
        slow_names = sorted(slow)
        for pool in pools:
            base = pd.concat([same[r] for r in pool], ignore_index=True)
            flagged = {}
            for cand in names:
                if cand in pool:
                    continue
                checks += 1
                flagged[cand] = bool((compare(base, same[cand], settings)["verdict"] == "regressed").any())
                alarms += flagged[cand]
            rest = [n for n in names if n not in pool]
            for a, b in zip(rest, rest[1:]):
                checks2 += 1
                alarms2 += flagged[a] and flagged[b]
            slow_flagged = {}
            for name in slow_names:
                slow_checks += 1
                slow_flagged[name] = bool((compare(base, slow[name], settings)["verdict"] == "regressed").any())
                caught += slow_flagged[name]
            for a, b in zip(slow_names, slow_names[1:]):
                slow_checks2 += 1
                caught2 += slow_flagged[a] and slow_flagged[b]
        line = f"min effect {effect:4.0%}: false alarms {alarms}/{checks} = {alarms / checks:.3f}"
        if slow_checks:
            line += f"; slowdown caught {caught}/{slow_checks} = {caught / slow_checks:.3f}"
        line += f" | with a retry: false alarms {alarms2}/{checks2} = {alarms2 / checks2:.3f}"
        if slow_checks2:
            line += f"; caught {caught2}/{slow_checks2} = {caught2 / slow_checks2:.3f}"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
