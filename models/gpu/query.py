"""What `nvidia-smi` prints, read as data: pure functions over its text, so they are tested on a machine with no GPU.

Two outputs are read. `--query-gpu=F1,F2,... --format=csv,noheader` prints one line per GPU, the fields in the
order asked, separated by ", ", with "[N/A]" or "[Not Supported]" where the driver has no value (a GB10's memory
total, for one). `-L` prints one "GPU <i>: <name> (UUID: GPU-...)" line per GPU, each followed by its MIG devices,
indented ("  MIG 1g.10gb     Device  0: (UUID: MIG-...)"), which are slices of that GPU and not GPUs.
When the driver is missing or sees no device, nvidia-smi prints a sentence instead ("No devices were found"); it
matches neither shape and counts as no GPU.
"""
from __future__ import annotations

import re
from typing import Sequence

NO_VALUE = ("[N/A]", "[Not Supported]")
PROBE_FIELDS = ("name", "driver_version", "memory.total")  # what envprobe asks, in this order
_GPU_LINE = re.compile(r"GPU \d+: ")


def parse_query_gpu(text: str, fields: Sequence[str]) -> list[dict[str, str | None]]:
    """One dict per GPU, keyed by `fields`; a value nvidia-smi has not is None. Lines that are not a row of
    len(fields) values (a message instead of data) are left out."""
    rows = []
    for line in text.splitlines():
        values = [v.strip() for v in line.split(",")]
        if len(values) != len(fields) or not values[0]:
            continue
        rows.append({f: (None if v in NO_VALUE else v) for f, v in zip(fields, values)})
    return rows


def gpu_summary(rows: list[dict[str, str | None]]) -> dict | None:
    """The what-ran `gpu` field from PROBE_FIELDS rows: the first GPU's model, driver and memory, and the count."""
    if not rows:
        return None
    first = rows[0]
    return {"model": first["name"], "count": len(rows), "driver": first["driver_version"],
            "memory": first["memory.total"]}


def count_gpus_from_list(text: str) -> int:
    """GPUs in `nvidia-smi -L` output: its "GPU <i>: " lines, not the MIG devices listed under them."""
    return sum(1 for line in text.splitlines() if _GPU_LINE.match(line))
