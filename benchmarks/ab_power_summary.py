"""Summary of benchmarks/ab_power.py's tries: detection and false-alarm rates, the paired noise pooled over the
tries, and the power and smallest detectable slowdown it implies (bench/analysis/paired.py's formulas); the same
again with each side run's fastest window (`--statistic peak`), re-judged from the tries' stores.

    .venv/bin/python benchmarks/ab_power_summary.py /tmp/ab-power [/tmp/ab-power-more ...]
"""
from __future__ import annotations

import csv
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.analysis.paired import PairedSettings, detectable_slowdown, power_at  # noqa: E402


def rejudge(store_path: Path, statistic: str, settings: PairedSettings):
    from bench.ab.session import SideRun
    from bench.commands.ab import judge
    from bench.store import Store

    with Store(store_path, read_only=True) as store:
        runs = []
        for r in store.runs():
            ab = json.loads(r["plan_json"])["ab"]
            runs.append(SideRun(ab["pair"], ab["side"], 0, r["run_id"], 0.0, Path(".")))
        results, _ = judge(store, runs, settings, statistic)
    return results[0] if results else None


def main() -> int:
    settings = PairedSettings()
    tries = [t for out in sys.argv[1:] for t in csv.DictReader(open(Path(out) / "tries.tsv"), delimiter="\t")]
    for statistic in ("median", "peak"):
        rows = {"slow": [], "same": []}
        for t in tries:
            cell = rejudge(Path(t["store"]), statistic, settings) if Path(t["store"]).exists() else None
            if cell is not None:
                rows[t["kind"]].append((t, cell))
        print(f"== statistic: {statistic}")
        for kind, items in rows.items():
            if not items:
                continue
            flagged = sum(c["verdict"] == "regressed" for _, c in items)
            ratios = [c["ratio"] for _, c in items]
            print(f"{kind}: {len(items)} tries, regressed in {flagged} ({flagged / len(items):.0%}); ratios "
                  f"{min(ratios):.3f}-{max(ratios):.3f}, geometric mean "
                  f"{math.exp(sum(map(math.log, ratios)) / len(ratios)):.3f}; verdicts "
                  + ", ".join(f"{v} {sum(c['verdict'] == v for _, c in items)}"
                              for v in sorted({c['verdict'] for _, c in items})))
            print("   per try: " + " ".join(f"{c['ratio']:.3f}/{c['sd_log']:.3f}/{c['verdict'][:4]}"
                                            for _, c in items))
        every = [c for items in rows.values() for _, c in items]
        if every:
            n = round(sum(c["pairs"] for c in every) / len(every))
            pooled = math.sqrt(sum(c["sd_log"] ** 2 for c in every) / len(every))
            print(f"pooled paired noise (sd of log B/A within a try, rms over {len(every)} tries): {pooled:.4f}; "
                  f"{n} pairs: power at a 10% slowdown {power_at(0.10, pooled, n):.2f}, smallest slowdown "
                  f"detected with 90% power {detectable_slowdown(pooled, n):.1%}; with 8 pairs "
                  f"{detectable_slowdown(pooled, 8):.1%}, 12 pairs {detectable_slowdown(pooled, 12):.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
