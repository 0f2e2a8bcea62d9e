"""A layout's two tiers from measured collective sweeps instead of the catalogue's links: the sweeps of each op
(allgather, reduce_scatter, allreduce, sendrecv, pipeline_p2p) run on 2 ranks inside one node and on 2 ranks on two
nodes become each tier's measured curve (Tier.measured: per size, the median over the sweeps' repeats), which prices
that op at the sizes a layout sends (bench/layouts/steptime.py). Ops no sweep measured fall back to α and β read off
the allgather curve (or any measured one): the smallest size's time and the slope between the two largest.

benchmarks/layout_prediction_shaped.py uses it on the emulated nodes, where inside a node is Gloo over the loopback
and between nodes the shaped link. Pure: rows in, tiers out."""
from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from typing import Any

from bench.layouts.fabric import Fabric, Tier
from models.registry.collectives import COLLECTIVES

OPS = ("allgather", "reduce_scatter", "allreduce", "sendrecv", "pipeline_p2p")


def measured_curves(rows: Iterable[Mapping[str, Any]], nodes: int) -> dict[str, tuple[tuple[int, float], ...]]:
    """op → ((bytes, seconds), ...) in size order, from the 2-rank sweep rows on `nodes` nodes (1: inside a node)."""
    times: dict[str, dict[int, list[float]]] = {}
    for r in rows:
        if r["op"] in OPS and int(r["world_size"]) == 2 and int(r["nodes"]) == nodes:
            times.setdefault(r["op"], {}).setdefault(int(r["bytes"]), []).append(float(r["time_median_s"]))
    return {op: tuple((size, statistics.median(ts)) for size, ts in sorted(by_size.items()))
            for op, by_size in times.items()}


def tier_of(curves: Mapping[str, tuple[tuple[int, float], ...]], name: str, source: str) -> Tier | None:
    """A tier priced by `curves`; None without one usable curve (two sizes at least)."""
    usable = {op: c for op, c in curves.items() if len(c) >= 2}
    if not usable:
        return None
    op = "allgather" if "allgather" in usable else sorted(usable)[0]
    curve = usable[op]
    (b0, t0), (b1, t1) = curve[-2], curve[-1]
    # The share of the bytes a 2-rank operation moves over its link is the op's bus factor at n = 2: slope = share / β.
    share = COLLECTIVES[op]["bus_factor"](2)
    slope = (t1 - t0) / (b1 - b0)
    beta = share / slope if slope > 0 else float("inf")
    return Tier(name, curve[0][1], beta, source, measured=usable)


def sweep_tiers(rows: Iterable[Mapping[str, Any]]) -> tuple[Tier | None, Tier | None]:
    """(inside a node, between nodes): the 1-node curves' tier and the 2-node ones'; None for a tier no sweep
    measured (bench/analysis/layout_prediction.py says which is missing)."""
    rows = list(rows)
    return (tier_of(measured_curves(rows, 1), "inside a node (measured)", "2-rank sweeps on one node"),
            tier_of(measured_curves(rows, 2), "between nodes (measured)", "2-rank sweeps on two nodes"))


def sweep_fabric(rows: Iterable[Mapping[str, Any]], ranks_per_node: int) -> Fabric:
    """The emulated cluster's fabric from its sweeps: inside a node the 1-node curves, between nodes the 2-node ones.
    ValueError naming the tier that has no sweep."""
    intra, inter = sweep_tiers(rows)
    for tier, where in ((intra, "one node"), (inter, "two nodes")):
        if tier is None:
            raise ValueError(f"no 2-rank collective sweep on {where} with two sizes or more: the tier is not measured")
    return Fabric(ranks_per_node, intra, inter)
