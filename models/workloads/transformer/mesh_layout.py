"""A parallel layout's description (docs/layouts.md, "Running layouts"): torchtitan's degrees (`DEGREES`), the
DeviceMesh's order (`MESH_ORDER`), `MeshLayout`, `read_layout` for the text form the plan has validated, `refusal`
for what the transformer worker cannot run, and `layout_facts`, what the record says of the layout."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DEGREES = ("dp_replicate", "dp_shard", "tp", "pp", "cp", "ep")
MESH_ORDER = ("pp", "dp_replicate", "dp_shard", "tp")  # torchtitan's order, outermost first (tp innermost: one node)


@dataclass(frozen=True)
class MeshLayout:
    dp_replicate: int = 1
    dp_shard: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    schedule: str = "none"
    v: int = 1
    m: int = 1

    @property
    def world(self) -> int:
        return self.dp_replicate * self.dp_shard * self.tp * self.pp * self.cp * self.ep

    @property
    def dp(self) -> int:
        return self.dp_replicate * self.dp_shard

    def dims(self) -> dict[str, int]:
        """The mesh's dimensions above 1, outermost first; dp_shard kept beside dp_replicate even at 1, so FSDP2
        replicates over its 2-D (HSDP) mesh."""
        return {name: getattr(self, name) for name in MESH_ORDER
                if getattr(self, name) > 1 or (name == "dp_shard" and self.dp_replicate > 1)}


def read_layout(text: str) -> MeshLayout:
    """The numbers of a layout's text form; ValueError for what is not one (the plan has checked the rules)."""
    values: dict[str, Any] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        key, _, raw = part.partition("=")
        key = key.strip()
        if key == "schedule":
            values[key] = raw.strip().lower()
        elif key in DEGREES or key in ("v", "m"):
            values[key] = int(raw)
        else:
            raise ValueError(f"layout {text!r}: unknown key {key!r}")
    if values.get("pp", 1) > 1 and "schedule" not in values:
        values["schedule"] = "interleaved" if values.get("v", 1) > 1 else "1f1b"
    return MeshLayout(**values)


def refusal(layout: MeshLayout, shape, *, world: int, cuda: bool, batch: int) -> str | None:
    """What this worker cannot run (the plan refuses the same cells with bench/layouts' words first)."""
    if layout.world != world:
        return f"layout: the degrees' product is {layout.world}, not the world size {world}"
    if layout.cp > 1 and not cuda:
        return "context parallelism runs on GPU cells only (ring attention over the GPU's attention kernels)"
    if layout.cp > 1 or layout.ep > 1:
        return "layout: cp and ep are not run by the transformer worker yet"
    if shape.heads % layout.tp or shape.kv_heads % layout.tp:
        return f"layout: {shape.heads} heads and {shape.kv_heads} key/value heads must divide by tp={layout.tp}"
    if shape.layers % (layout.pp * layout.v):
        return f"layout: {shape.layers} layers are not divisible by pp × v = {layout.pp * layout.v}"
    if layout.pp > 1 and batch % layout.m:
        return f"layout: {batch} sequences per replica are not divisible by m={layout.m} micro-batches"
    return None


def layout_facts(layout: MeshLayout, dims: dict[str, int]) -> dict[str, Any]:
    return {"degrees": {name: getattr(layout, name) for name in DEGREES}, "schedule": layout.schedule,
            "virtual_stages": layout.v, "microbatches": layout.m, "mesh": dict(dims),
            "bubble_predicted": (layout.pp - 1) / (layout.v * layout.m) if layout.pp > 1 else 0.0,
            "tp_style": "sequence parallel norms, q/k/v and gate/up column-wise" if layout.tp > 1 else None,
            "dp_style": ("HSDP" if layout.dp_replicate > 1 and layout.dp_shard > 1 else "FSDP2")
            if layout.dp > 1 else None}

