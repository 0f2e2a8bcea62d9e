"""The transformer shapes the planner knows: the workers' table (models/workloads/transformer/shapes.py) and the
published Llama 3 shapes the workers do not train yet, kept here as data while models/ moves. Numbers from Llama 3's
paper (Grattafiori et al., 2024, "The Llama 3 Herd of Models", table 3: layers, width, FFN width, heads, key/value
heads; vocabulary 128,256) and torchtitan's llama3 model args (FFN widths 28,672 and 53,248)."""
from __future__ import annotations

from models.workloads.transformer.shapes import CONFIGS, Shape, shape_from_id

PUBLISHED: dict[str, Shape] = {
    "llama3-70b": Shape("llama", layers=80, width=8192, heads=64, kv_heads=8, ffn=28_672, vocab=128_256, seq=8192,
                        tied=False, rope_theta=500_000.0),
    "llama3-405b": Shape("llama", layers=126, width=16_384, heads=128, kv_heads=8, ffn=53_248, vocab=128_256,
                         seq=8192, tied=False, rope_theta=500_000.0),
}


def known() -> dict[str, Shape]:
    return {**CONFIGS, **{name: shape for name, shape in PUBLISHED.items() if name not in CONFIGS}}


def shape_named(name: str) -> Shape:
    """A shape by name or by shape id (the user's numbers: llama-L80-d8192-h64-kv8-f28672-v128256-t8192-untied);
    ValueError naming the known ones otherwise."""
    shape = known().get(name) or shape_from_id(name)
    if shape is None:
        raise ValueError(f"unknown model {name!r} (known: {', '.join(known())}, or a shape id such as "
                         "llama-L80-d8192-h64-kv8-f28672-v128256-t8192-untied)")
    return shape
