"""Summary of benchmarks/ab_power.py's tries: how often each kind of try ended regressed, unchanged ("no change
larger than the min effect"), improved or undecided; the pairs and minutes each took to decide (median and range);
the ratios seen; and the paired noise pooled over the tries (sd of log B/A within a try).

    .venv/bin/python benchmarks/ab_power_summary.py /tmp/ab-power [/tmp/ab-power-more ...]
"""
from __future__ import annotations

import csv
import json
import math
import os
import statistics
import sys
from pathlib import Path


def main() -> int:
    tries = [t for out in sys.argv[1:] for t in csv.DictReader(open(Path(out) / "tries.tsv"), delimiter="\t")]
    rows = {"slow": [], "same": []}
    for t in tries:
        path = Path(t["json"])
        if not path.exists():
            print(f"try {t['try']} ({t['kind']}): no result (exit {t['exit']}, {t['seconds']} s)")
            continue
        doc = json.loads(path.read_text())
        (cell,) = doc["cells"]
        rows[t["kind"]].append((float(t["seconds"]), doc["course"], cell))
    every = []
    for kind, items in rows.items():
        if not items:
            continue
        verdicts = [c["verdict"] for _, _, c in items]
        minutes = [s / 60 for s, _, _ in items]
        pairs = [c["pairs"] for _, _, c in items]
        ratios = [c["ratio"] for _, _, c in items]
        print(f"{kind}: {len(items)} tries: " + ", ".join(f"{v} {verdicts.count(v)}" for v in sorted(set(verdicts)))
              + f"; pairs median {statistics.median(pairs):g} ({min(pairs)}-{max(pairs)}); minutes median "
              f"{statistics.median(minutes):.1f} ({min(minutes):.1f}-{max(minutes):.1f}); ratios "
              f"{min(ratios):.3f}-{max(ratios):.3f}, geometric mean "
              f"{math.exp(statistics.mean(map(math.log, ratios))):.3f}")
        print("   per try (ratio/sd/pairs/verdict): " + " ".join(
            f"{c['ratio']:.3f}/{c['sd_log']:.3f}/{c['pairs']}/{c['verdict'][:4]}" for _, _, c in items))
        every += [c for _, _, c in items]
    if every:
        pooled = math.sqrt(sum(c["sd_log"] ** 2 for c in every) / len(every))
        print(f"pooled paired noise (sd of log B/A within a try, rms over {len(every)} tries): {pooled:.4f}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # its reader (head) closed the pipe: end quietly, as a Unix tool does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(141)
