"""What the labels of a table's cells share, and what is left of each (bench.cells.label.cell_label): within one
table the cells mostly differ in one or two settings, and the whole label of every cell would not leave a 120-column
line room for the figures. The table's title line names the shared parts once; each row keeps its worker count."""
from __future__ import annotations

import re
from collections.abc import Sequence

_WORKERS = re.compile(r"\d+w")  # a label's worker count, e.g. "2w"


def _parts(label: str) -> tuple[list[str], list[str]]:
    path, *tokens = label.split(" ")
    return path.split("/"), tokens


def relative_labels(labels: Sequence[str]) -> tuple[list[str], str]:
    """Each label less the path parts and tokens every label shares but the worker count ("2w", kept in every row),
    and those shared parts as one label-like text ("cpu/ib=off fp32 b16"). Labels of distinct cells stay distinct
    (each differs from the others in a part that is then not shared)."""
    split = [_parts(label) for label in labels]
    if not split:
        return [], ""
    paths = {p for p in set.intersection(*(set(p) for p, _ in split)) if not _WORKERS.fullmatch(p)}
    tokens = set.intersection(*(set(t) for _, t in split))
    out = []
    for path, toks in split:
        rest = "/".join(p for p in path if p not in paths)
        out.append(" ".join(x for x in [rest, *(t for t in toks if t not in tokens)] if x))
    first_path, first_tokens = split[0]
    shared = " ".join(x for x in ["/".join(p for p in first_path if p in paths),
                                  *(t for t in first_tokens if t in tokens)] if x)
    return out, shared


def shared_title(shared: str, rows: int) -> str:
    """The title line's words for what every row shares ("" where nothing is)."""
    if not shared:
        return ""
    return f"every cell: {shared}" if rows > 1 else shared
