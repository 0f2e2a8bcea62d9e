"""The transformer shapes the planner knows: the workers' own table (models/workloads/transformer/shapes.py, where
each shape's source is given), or a shape id with the user's numbers."""
from __future__ import annotations

from models.workloads.transformer.shapes import CONFIGS, Shape, shape_from_id


def known() -> dict[str, Shape]:
    return dict(CONFIGS)


def shape_named(name: str) -> Shape:
    """A shape by name or by shape id (the user's numbers: llama-L80-d8192-h64-kv8-f28672-v128256-t8192-untied);
    ValueError naming the known ones otherwise."""
    shape = known().get(name) or shape_from_id(name)
    if shape is None:
        raise ValueError(f"unknown model {name!r} (known: {', '.join(known())}, or a shape id such as "
                         "llama-L80-d8192-h64-kv8-f28672-v128256-t8192-untied)")
    return shape
