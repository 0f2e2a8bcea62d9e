"""A measured layout cell's tokens/s per GPU as bench/layouts/steptime.py predicts it from the store's other cells:
the report's "predicted" beside measured (docs/layouts.md "In the report"), and benchmarks/layout_prediction_shaped.py's
check on emulated nodes. Pure: cells and sweep rows in, predictions out.

The inputs, nothing fitted to the cell itself:
- compute, the base: the 1-worker cell without a layout of the same model, sequence, precision and GPU (the same
  batch per worker first, then the cell's engine, then the plain one): its FLOPs per token × tokens/s is one rank's
  rate;
- compute, the twin (a cell on more than one node only): a one-node layout cell of the same model, sequence, batch,
  precision and GPU running the same layout, else the largest one whose parallel dimensions are among the cell's
  (FSDP on one node for HSDP or flat FSDP across nodes). The efficiency at which the model gives the twin its measured
  rate, per whole core, fixes the compute as the published tables' anchor run does. Without a twin (every one-node
  cell) the base's rate alone: that leaves out what the layout costs in compute (smaller matrices, more calls), so it
  reads high, and the prediction says which anchor it used;
- each rank's share of the cores: where ranks outnumber the cores of the machine they share (CPU cells; emulated nodes
  share one machine), each runs at cores / ranks, and no core is idle to move Gloo's bytes behind compute, so nothing
  overlaps. A GPU rank has its own GPU;
- the fabric: the store's 2-rank collective sweeps on the cell's GPU (inside one node and across two:
  bench/layouts/sweep_tiers.py); a catalogue GPU without sweeps takes the catalogue's links
  (bench/layouts/fabric.py fabric_of); a CPU cell without them has no prediction, and says so;
- what the workers do (models/workloads/transformer/layouts.py): the output head whole on every tp rank, and fp32
  activations and parameters unless the cell trains in bf16 or fp16."""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bench.analysis.missing import is_missing
from bench.layouts.fabric import Fabric, fabric_of
from bench.layouts.layout import Layout, LayoutError, parse_layout
from bench.layouts.shapes import shape_named
from bench.layouts.steptime import DIMENSIONS, StepTime, efficiency_for, step_time
from bench.layouts.sweep_tiers import sweep_tiers

TWIN = "twin"  # anchored on a one-node layout cell
FLOPS = "flops"  # anchored on the 1-worker cell's FLOP/s alone
HALF = ("bf16", "fp16")


@dataclass(frozen=True)
class LayoutPrediction:
    cell_id: str
    tokens_per_s_per_gpu: float | None = None  # predicted
    step: StepTime | None = None  # from the anchor (twin or flops)
    flops_only: StepTime | None = None  # from the base's FLOP/s alone, beside it
    anchor: str | None = None  # TWIN or FLOPS
    base_cell_id: str | None = None
    base_tokens_per_s: float | None = None  # the 1-worker cell's
    twin_cell_id: str | None = None
    twin_layout: str | None = None
    twin_compute_efficiency: float | None = None  # of a whole core (or GPU), at which the model gives the twin its rate
    core_share: float | None = None
    why: str | None = None  # no prediction: why


def core_share(ranks: Sequence[Mapping[str, Any]], gpu: str | None) -> tuple[float | None, str | None]:
    """(each rank's share of a core, at most 1; or None and why) from a record's ranks ({host, machine, cpus}: the
    record's per_rank). Ranks that name the same machine share the cores they may run on (the union of their CPUs);
    without machine ids the ranks of one host are one machine, and ranks on several hosts cannot be placed."""
    if gpu not in (None, "cpu"):
        return 1.0, None  # a rank per GPU: its compute is its own
    if not ranks:
        return None, "its records do not list their ranks"
    if all(r.get("machine") for r in ranks):
        key = "machine"
    elif len({r.get("host") for r in ranks}) == 1:
        key = "host"
    else:
        return None, "its records name no machine: whether its nodes share a machine's cores is unknown"
    machines: dict[Any, tuple[set[int], int]] = {}
    for r in ranks:
        cpus, count = machines.get(r.get(key), (set(), 0))
        machines[r.get(key)] = (cpus | set(r.get("cpus") or []), count + 1)
    if any(not cpus for cpus, _ in machines.values()):
        return None, "its records do not say which CPUs their ranks ran on"
    return min(1.0, min(len(cpus) / count for cpus, count in machines.values())), None


def _text(v) -> str | None:
    return None if is_missing(v) else str(v)


def _count(v, default: int) -> int:
    """A whole count from a cell's column (NaN or None where the cell leaves it out: `default`)."""
    return default if v is None or is_missing(v) or not v else int(v)


def _same_work(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return all(_text(a.get(k)) == _text(b.get(k)) for k in ("model", "seq_len", "precision", "gpu"))


def base_of(cell: Mapping[str, Any], cells: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The 1-worker cell without a layout that anchors `cell`'s compute: the same model, sequence, precision and GPU;
    the same batch per worker first, then the cell's engine (FSDP2's wrapping costs on one rank too), then the plain
    engine (native), then the first."""
    found = [c for c in cells if int(c["gpus"]) == 1 and _text(c.get("layout")) is None and _same_work(c, cell)]
    found.sort(key=lambda c: (int(c["batch_per_gpu"]) != int(cell["batch_per_gpu"]),
                              c.get("engine") != cell.get("engine"), c.get("engine") != "native"))
    return found[0] if found else None


def _dimensions(layout: Layout) -> set[str]:
    return {d for d in DIMENSIONS if getattr(layout, d) > 1}


def twin_of(cell: Mapping[str, Any], layout: Layout,
            cells: Iterable[Mapping[str, Any]]) -> tuple[Mapping[str, Any], Layout] | None:
    """The one-node layout cell that anchors a cell on several nodes (None for a one-node cell): the same layout,
    else the largest whose parallel dimensions are all among the cell's."""
    if _count(cell.get("nodes"), 1) <= 1:
        return None
    found = []
    for c in cells:
        if (_count(c.get("nodes"), 1) != 1 or _text(c.get("layout")) is None or not _same_work(c, cell)
                or int(c["batch_per_gpu"]) != int(cell["batch_per_gpu"])):
            continue
        try:
            twin, _ = parse_layout(str(c["layout"]), world=int(c["gpus"]))
        except LayoutError:
            continue
        if str(c["layout"]) == str(cell["layout"]):
            found.append((0, 0, c, twin))
        elif _dimensions(twin) <= _dimensions(layout):
            found.append((1, -twin.world, c, twin))
    if not found:
        return None
    _, _, c, twin = min(found, key=lambda f: f[:2])
    return c, twin


def fabric_for(cell: Mapping[str, Any], sweeps: Sequence[Mapping[str, Any]],
               ranks_per_node: int) -> tuple[Fabric | None, str | None]:
    """The two tiers `cell`'s traffic is priced on: the store's 2-rank sweeps on its GPU, else the catalogue's links
    for its SKU; (None, why) where neither is there."""
    gpu = _text(cell.get("gpu")) or "cpu"
    mine = [s for s in sweeps if (_text(s.get("gpu")) or "cpu") == gpu]
    intra, inter = sweep_tiers(mine)
    nodes = _count(cell.get("nodes"), 1)
    if intra is not None and (inter is not None or nodes == 1):
        return Fabric(ranks_per_node, intra, inter), None
    if gpu != "cpu":
        try:
            return fabric_of(gpu, ranks_per_node, "ib" if _count(cell.get("ib"), 0) else "tcp"), None
        except (KeyError, ValueError) as e:
            return None, f"no collective sweep on {gpu} in the store and no catalogue fabric for it ({e})"
    where = "inside a node" if intra is None else "between two nodes"
    return None, f"no 2-rank collective sweep {where} in the store to price its traffic (docs/layouts.md)"


def _step(shape, layout: Layout, fabric: Fabric, cell: Mapping[str, Any], *, seq: int, rate: float,
          efficiency: float, overlap: bool = True) -> StepTime:
    nbytes = 2 if _text(cell.get("precision")) in HALF else 4
    return step_time(shape, layout, fabric, seq=seq, global_batch=int(cell["batch_per_gpu"]) * layout.dp,
                     peak_flops=rate, efficiency=efficiency, head_over_tp=False, activation_bytes=nbytes,
                     param_bytes=nbytes, overlap=overlap)


def predict(cell: Mapping[str, Any], cells: Sequence[Mapping[str, Any]],
            sweeps: Sequence[Mapping[str, Any]]) -> LayoutPrediction:
    """`cell`'s predicted tokens/s per GPU. Each cell: cell_id, layout, model, gpu, gpus, nodes, workers_per_node,
    seq_len, batch_per_gpu, precision, ib, engine, samples_per_sec (the median) and core_share (each rank's share of
    a core: core_share() of its records; None where unknown, with core_share_why)."""
    cid = str(cell["cell_id"])
    try:
        shape = shape_named(str(cell["model"]))
        layout, _ = parse_layout(str(cell["layout"]), world=int(cell["gpus"]))
    except (ValueError, LayoutError) as e:
        return LayoutPrediction(cid, why=str(e))
    base = base_of(cell, cells)
    if base is None:
        return LayoutPrediction(cid, why="no 1-worker cell of the same model, sequence and precision to anchor "
                                         "its compute")
    share = cell.get("core_share")
    if share is None or is_missing(share):
        return LayoutPrediction(cid, base_cell_id=str(base["cell_id"]),
                                why=cell.get("core_share_why") or "its ranks' share of the cores is not known")
    seq = int(cell["seq_len"]) if not is_missing(cell.get("seq_len")) else shape.seq
    tokens_1 = float(base["samples_per_sec"]) * seq
    rate = shape.flops_per_token(seq) * tokens_1  # one rank's FLOP/s, all it does per token
    per_node = _count(cell.get("workers_per_node"), -(-int(cell["gpus"]) // _count(cell.get("nodes"), 1)))
    fabric, why = fabric_for(cell, sweeps, per_node)
    common = {"cell_id": cid, "base_cell_id": str(base["cell_id"]), "base_tokens_per_s": tokens_1,
              "core_share": float(share)}
    if fabric is None:
        return LayoutPrediction(**common, why=why)
    cpu = (_text(cell.get("gpu")) or "cpu") == "cpu"
    # Gloo moves bytes on the CPU: with more ranks than cores no core is idle to hide it behind compute.
    overlap = not cpu or share >= 1.0
    flops_only = _step(shape, layout, fabric, cell, seq=seq, rate=rate, efficiency=share, overlap=overlap)
    found = twin_of(cell, layout, cells)
    if found is None:
        return LayoutPrediction(**common, tokens_per_s_per_gpu=flops_only.tokens_per_s_per_gpu, step=flops_only,
                                flops_only=flops_only, anchor=FLOPS)
    twin, twin_layout = found
    twin_fabric, _ = fabric_for(twin, sweeps, twin_layout.world)
    twin_fabric = twin_fabric or Fabric(twin_layout.world, fabric.intra, None)
    # The twin's own share where its records gave one, else the cell's cores over the twin's ranks.
    twin_share = twin.get("core_share")
    if twin_share is None or is_missing(twin_share):
        twin_share = min(1.0, share * int(cell["gpus"]) / int(twin["gpus"])) if cpu else 1.0
    # The efficiency at which the model gives the twin (the layout on one node) its measured rate, as the published
    # tables' anchor run fixes it; then a whole core's: the twin's over its share of the cores.
    twin_overlap = not cpu or twin_share >= 1.0
    twin_e = efficiency_for(
        lambda e: _step(shape, twin_layout, twin_fabric, twin, seq=seq, rate=rate, efficiency=e,
                        overlap=twin_overlap).tokens_per_s_per_gpu,
        float(twin["samples_per_sec"]) * seq / int(twin["gpus"]), low=1e-4, high=100.0) / twin_share
    step = _step(shape, layout, fabric, cell, seq=seq, rate=rate, efficiency=twin_e * share, overlap=overlap)
    return LayoutPrediction(**common, tokens_per_s_per_gpu=step.tokens_per_s_per_gpu, step=step,
                            flops_only=flops_only, anchor=TWIN, twin_cell_id=str(twin["cell_id"]),
                            twin_layout=str(twin["layout"]), twin_compute_efficiency=twin_e)
