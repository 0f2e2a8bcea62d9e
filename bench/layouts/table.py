"""The planner's rows as text: the columns of `bench model --layouts` (table and Markdown share them)."""
from __future__ import annotations

from bench.layouts.steptime import DIMENSIONS

HEADER = ("#", "layout", "ckpt", "GiB/GPU", "fits", "tokens/s/GPU", "MFU", "bubble",
          "exposed ms tp/cp/pp/fsdp/dp", "step s")


def cells(row: dict) -> tuple[str, ...]:
    exposed = "/".join(f"{row['exposed_s'][d] * 1e3:.0f}" for d in DIMENSIONS)
    return (str(row["rank"] or "—"), row["layout"], row["checkpointing"],
            f"{row['memory']['total_bytes'] / 2**30:.1f}", "yes" if row["fits"] else "no",
            f"{row['tokens_per_s_per_gpu']:,.0f}", f"{row['mfu']:.1%}", f"{row['bubble']:.1%}", exposed,
            f"{row['step_s']:.2f}")


def text_table(rows: list[dict]) -> list[str]:
    lines = [HEADER] + [cells(r) for r in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(HEADER))]
    left = {1, 2}
    return ["  ".join(c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths))).rstrip()
            for line in lines]


def markdown_table(rows: list[dict]) -> list[str]:
    out = ["| " + " | ".join(HEADER) + " |", "|" + "|".join("---" for _ in HEADER) + "|"]
    return out + ["| " + " | ".join(cells(r)) + " |" for r in rows]
