"""What-if scaling model: α-β ring allreduce under data-parallel ResNet-50 training (pure functions, no I/O:
the model is held against the published 2018 study in bench/analysis/study_validation.py).

    step(N) = compute + max(0, allreduce(N) − overlap · backward)        compute = batch / X(1)
    backward = BACKWARD_FRACTION · compute                              X(N) = N · batch / step(N)
    E(N) = X(N) / (N · X(1)) = compute / step(N)

Allreduce of G gradient bytes over p ranks on one link kind (ring): 2(p−1)/p · G / β + 2(p−1) · α.
Across nodes it is hierarchical: a ring inside each VM over its intra-node link, then a ring between the VMs over the
inter-node link (the bytes the NIC must carry, 2(n−1)/n · G, are what bound it). Two allreduce paths:
- `nccl`: GPU buffers; intra-node ring over PCIe/NVLink, inter-node ring over IB or TCP;
- `host`: Horovod without NCCL over an MPI that is not CUDA-aware (the 2018 Intel MPI runs): every rank's gradients
  are copied to host memory and back through one staging path the VM's ranks share (2 · p_VM · G at the fitted
  `host-stage-vm` rate), the ranks of a VM reduce in host memory through shared memory, and the VMs exchange over
  the fabric;
- `nccl-ring`: NCCL 2.2's one flat ring over every GPU (the 2018 Open MPI runs): each VM's NIC carries 2(p−1)/p · G.

`overlap` is the fraction of the backward pass that communication can hide behind. Default 0.75, from ResNet-50's
shape, not from a fit: backprop produces the last stage's gradients first, and conv5_x + fc hold 67% of the 25.6 M
parameters while taking about a fifth of the FLOPs, so the bulk of the bytes can be on the wire for the remaining
~75-80% of the backward pass. 0 means no overlap (communication after backprop), 1 the whole backward pass.

Measured links: when the store holds a usable α/β fit of the cell's own stack (bench/analysis/collectives.py, from
its allreduce sweep: gpu, mpi, ib, engine, nodes), the allreduce time is that fit's α + 2(n−1)/n · G / β for the
whole collective, and every prediction says which it used (`links`: "measured" or "data sheet").

CPU workers: the cores compute, so the collective's own CPU work (copies, the reduction, an engine polling while
it waits) takes turns with compute instead of hiding behind it. When the measured fit knows what the collective
costs the CPU (`cpu_share`, CPU seconds per wall second, from the sweep), that part is exposed whole:

    exposed = cpu + max(0, allreduce − cpu − overlap · backward)        cpu = min(1, cpu_share) · allreduce

(GPU workers compute on the GPU and leave the host cores to communication: no such term.)

When the sweep also measured compute and collective on shared cores (models/workloads/collectives/contention.py: a probe
kernel's rate while the engine idles, ρ_idle, and while the largest allreduce is in flight, ρ_during, as fractions
of its rate alone, and that allreduce's time under the load over its time alone, s), that measurement replaces the
CPU-share rule. The compute before the overlap window runs beside the idling engine; in the window the allreduce,
stretched to s · allreduce, runs beside the rest of the backward pass, which advances at ρ_during meanwhile and at
ρ_idle once the allreduce is done:

    hidden = overlap · backward          comm = s · allreduce
    step = (compute − hidden) / ρ_idle + comm + max(0, hidden − ρ_during · comm) / ρ_idle

With ρ_idle = ρ_during = s = 1 this is the plain rule, compute + max(0, allreduce − hidden).

When the sweep measured contention at several sizes (models/workloads/collectives/contention.py, CONTENDED_SIZES), the
one allreduce above gives way to Horovod's fused operations (bench/analysis/fusion.py, simulate_shared): ResNet-50's
gradients become ready in backward order, each cycle fuses what is ready, and each operation takes its size's measured
stretch times its size's measured time alone while the backward pass advances at that size's measured rate during it
(ρ_idle between operations); an operation that outlives the backward pass runs at its time alone:

    step = (1 − 2/3) · compute / ρ_idle + backward's wall time beside the operations + the last operation's tail

When the sweep also timed the probe beside a replay of a whole step's gradient stream
(models/workloads/collectives/contention.py replay: the 161 gradients submitted at their ready points, as training's
hooks submit them; the slowest rank's rate, ρ_replay), the backward pass advances at ρ_replay whatever is in flight —
measured beside the stream Horovod really negotiates, where the single-size figures see one tensor at a time — and the
operations keep their sizes' stretch:

    step = (1 − 2/3) · compute / ρ_idle + backward / ρ_replay + the last operation's tail

No overlap constant there: where each gradient is ready comes from the architecture. Horovod's idle loop
alone costs a compute-bound CPU cell: measured on the emulated cluster, one CPU per node, ρ_idle was 0.77–0.93
beside Horovod's Gloo loop and 0.57–0.64 beside Horovod over Open MPI, whose progress thread polls
(docs/scaling-model.md, "Prediction against measurement").

Link figures (α latency, β achievable bandwidth) and their sources are in LINKS; the fabric of each catalogue key is
in FABRICS (numbers kept here, keyed by catalogue key, so the catalogue stays descriptive).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Collection, Mapping

from bench.analysis import AnalysisError
from bench.analysis.fusion import DEFAULT_CYCLE_S, DEFAULT_THRESHOLD_BYTES, resnet50_gradients, simulate_shared
from bench.analysis.traffic import forward_units, samples_per_step, step_of

RESNET50_PARAMS = 25_557_032  # torchvision resnet50 (v1.5); tf_cnn_benchmarks' resnet50 has the same tensor sizes
BYTES_PER_GRADIENT = {"fp32": 4, "fp16": 2, "bf16": 2}
BACKWARD_FRACTION = 2 / 3  # backward ≈ 2× the forward FLOPs: 2/3 of a training step's compute
DEFAULT_OVERLAP = 0.75


@dataclass(frozen=True)
class Link:
    name: str
    alpha_s: float  # per-message latency
    beta_Bps: float  # achievable bandwidth, bytes/s, one direction
    source: str


GB = 1e9
LINKS: dict[str, Link] = {
    "pcie3": Link("PCIe gen3 x16 (pinned copies)", 10e-6, 12 * GB,
                  "PCIe 3.0 x16 = 15.75 GB/s raw; ~12 GB/s is what CUDA's bandwidthTest reaches with pinned memory"),
    "pcie3-pageable": Link("PCIe gen3 x16 (pageable copies)", 10e-6, 6 * GB,
                           "pageable cudaMemcpy goes through a driver staging buffer: about half the pinned rate "
                           "(NVIDIA, 'How to Optimize Data Transfers in CUDA C/C++')"),
    # FITTED, on one series (V100 over IB, 32 GPUs; fit_vm_stage, `bench model --validate` refits it and marks the
    # series): the host path's copies to and from host memory of all of a VM's ranks go through one staging path of
    # this rate together, not each through a pageable path of its own. Held out: K80, P40, P100 over IB.
    "host-stage-vm": Link("host staging per VM (all its ranks' copies together)", 10e-6, 5.0 * GB,
                          "fitted to the 2018 V100 InfiniBand series at 32 GPUs (bench model --validate); "
                          "4.98 GB/s, rounded; one pageable copy path is ~6 GB/s"),
    "host-shm": Link("host memory, MPI shared-memory reduce", 1e-6, 5 * GB,
                     "one core per rank streams through DRAM: ~5 GB/s single-thread copy+reduce on a 2016 Xeon "
                     "E5-2690 v3/v4 (STREAM-class single-core figure)"),
    "nvlink2": Link("NVLink 2 (V100 SXM2, hybrid cube mesh)", 5e-6, 130 * GB, "NVIDIA V100 data sheet: 300 GB/s total"),
    "nvlink3": Link("NVLink 3 (A100 SXM4 via NVSwitch)", 5e-6, 230 * GB, "NVIDIA A100 data sheet: 600 GB/s total"),
    "nvlink4": Link("NVLink 4 (H100/H200 SXM via NVSwitch)", 5e-6, 360 * GB, "NVIDIA H100 data sheet: 900 GB/s total"),
    "fdr-ib": Link("FDR InfiniBand 4x", 1.5e-6, 6.0 * GB,
                   "56 Gb/s signalling, 54.5 Gb/s data (64b/66b) = 6.8 GB/s; MPI point-to-point ~6.0 GB/s"),
    "edr-ib": Link("EDR InfiniBand 4x", 1.2e-6, 11.5 * GB, "100 Gb/s = 12.5 GB/s; ~11.5 GB/s achievable"),
    "hdr-ib-8": Link("8× HDR InfiniBand (one per GPU)", 1.2e-6, 8 * 23 * GB, "8 × 200 Gb/s, ~23 GB/s each achievable"),
    "ndr-ib-8": Link("8× NDR InfiniBand (one per GPU)", 1.2e-6, 8 * 46 * GB, "8 × 400 Gb/s, ~46 GB/s each achievable"),
    # The 2018 Batch AI TCP runs: the NC/ND RDMA sizes had no Accelerated Networking, so eth0 traffic went through
    # the Hyper-V software switch; Azure published no bandwidth for these sizes (NCv3 page: no network column).
    # ASSUMPTION, a global parameter: 4 Gb/s for one NCCL socket stream through the software switch.
    "azure-tcp-2018": Link("Azure Ethernet without Accelerated Networking (2018)", 50e-6, 0.5 * GB,
                           "assumption: 4 Gb/s single-stream TCP via the Hyper-V vSwitch; no published figure"),
    "azure-tcp-an": Link("Azure Ethernet with Accelerated Networking", 30e-6, 25 / 8 * GB,
                         "Azure documents up to ~25-40 Gb/s for large sizes with Accelerated Networking; 25 Gb/s"),
    "loopback": Link("shared memory (CPU workers)", 1e-6, 5 * GB, "single-core memory streaming"),
}

# Catalogue key → intra-node link, inter-node links for IB and TCP (None: that fabric is absent).
FABRICS: dict[str, dict[str, str | None]] = {
    "K80": {"intra": "pcie3", "ib": "fdr-ib", "tcp": "azure-tcp-2018"},
    "P40": {"intra": "pcie3", "ib": "fdr-ib", "tcp": "azure-tcp-2018"},
    "P100": {"intra": "pcie3", "ib": "fdr-ib", "tcp": "azure-tcp-2018"},
    "V100": {"intra": "pcie3", "ib": "fdr-ib", "tcp": "azure-tcp-2018"},
    "V100-ND40": {"intra": "nvlink2", "ib": "edr-ib", "tcp": "azure-tcp-an"},
    "T4": {"intra": "pcie3", "ib": None, "tcp": "azure-tcp-an"},
    "A100-PCIe": {"intra": "pcie3", "ib": None, "tcp": "azure-tcp-an"},
    "A100": {"intra": "nvlink3", "ib": "hdr-ib-8", "tcp": "azure-tcp-an"},
    "H100-NVL": {"intra": "pcie3", "ib": None, "tcp": "azure-tcp-an"},
    "H100": {"intra": "nvlink4", "ib": "ndr-ib-8", "tcp": "azure-tcp-an"},
    "H200": {"intra": "nvlink4", "ib": "ndr-ib-8", "tcp": "azure-tcp-an"},
    "cpu": {"intra": "loopback", "ib": None, "tcp": "loopback"},
}


def gradient_bytes(precision: str = "fp32", params: int = RESNET50_PARAMS) -> int:
    return params * BYTES_PER_GRADIENT[precision]


def ring_allreduce_s(ranks: int, nbytes: float, link: Link) -> float:
    """Ring allreduce (reduce-scatter + allgather) of nbytes over `ranks` ranks on one link kind."""
    if ranks <= 1:
        return 0.0
    return 2 * (ranks - 1) / ranks * nbytes / link.beta_Bps + 2 * (ranks - 1) * link.alpha_s


def allreduce_s(gpus: int, gpus_per_node: int, nbytes: float, intra: Link, inter: Link | None,
                path: str = "nccl", stage: Link | None = None) -> float:
    """Seconds for one step's gradient allreduce: intra-node ring, then inter-node ring between the VMs.
    `host` path adds the copies to and from host memory and reduces inside the VM through shared memory."""
    per_node = min(gpus, gpus_per_node)
    nodes = math.ceil(gpus / gpus_per_node)
    if gpus <= 1:
        return 0.0
    if nodes > 1 and inter is None:
        raise AnalysisError("more than one node but no inter-node link")
    if path == "host":
        # Every rank of the VM copies its gradients to host memory and back; those copies share one staging path.
        stage = stage or LINKS["host-stage-vm"]
        t = 2 * (per_node * nbytes / stage.beta_Bps + stage.alpha_s) + \
            ring_allreduce_s(per_node, nbytes, LINKS["host-shm"])
    elif path == "nccl":
        t = ring_allreduce_s(per_node, nbytes, intra)
    elif path == "nccl-ring":
        # NCCL 2.2 (2018) built one flat ring over every GPU (trees and node-aware rings came with 2.4): each node's
        # NIC carries 2(p−1)/p of the gradients for p GPUs, not 2(n−1)/n for n nodes, and bounds the whole ring.
        if nodes == 1:
            return ring_allreduce_s(per_node, nbytes, intra)
        return ring_allreduce_s(gpus, nbytes, inter)
    else:
        raise AnalysisError(f"unknown allreduce path {path!r} (nccl, nccl-ring or host)")
    return t + (ring_allreduce_s(nodes, nbytes, inter) if nodes > 1 else 0.0)


@dataclass(frozen=True)
class Prediction:
    gpus: int
    nodes: int
    fabric: str
    path: str
    compute_s: float
    comm_s: float
    exposed_s: float
    step_s: float
    samples_per_sec: float
    efficiency: float  # against the 1-GPU throughput given
    links: str = "data sheet"  # where α and β came from: "data sheet" (LINKS) or "measured" (a fitted sweep)


def predict(gpu: str, gpus: int, samples_per_sec_1gpu: float, batch_per_gpu: int, *, fabric: str = "ib",
            path: str = "nccl", precision: str = "fp32", overlap: float = DEFAULT_OVERLAP,
            gpus_per_node: int | None = None, links: dict[str, Link] | None = None,
            measured: Any = None, image_size: int = 224, fusion: tuple[float, int] | None = None,
            gradients: list | None = None, traffic: float = 1.0, forward_traffic: float = 0.0) -> Prediction:
    """Throughput and efficiency at `gpus` workers of catalogue SKU `gpu` from its measured 1-GPU throughput.
    `gradients`: the model's gradient stream (bench/analysis/traffic.py; None: ResNet-50's at `image_size`), whose
    bytes are what one step reduces; `traffic`: the engine's bytes over an allreduce of them (FSDP2 1.5), of which
    `forward_traffic` (FSDP2 0.5: its forward all-gathers, one per unit) is moved before each unit's forward rather
    than beside the backward pass.
    `measured`: a usable collectives.AlphaBeta of the cell's stack; its allreduce replaces the data-sheet links.
    `image_size` and `fusion` (Horovod's cycle seconds and fusion threshold bytes; None: its defaults since 0.21)
    place the fused operations when contention was measured per operation on CPU workers."""
    from bench.facts.catalog import catalog

    if not 0 <= overlap <= 1:
        raise AnalysisError(f"overlap must be within [0, 1], got {overlap}")
    if samples_per_sec_1gpu <= 0 or batch_per_gpu <= 0 or gpus < 1:
        raise AnalysisError("need a positive 1-GPU throughput, batch and worker count")
    links = links or LINKS
    if fabric not in ("ib", "tcp"):
        raise AnalysisError(f"fabric must be ib or tcp, got {fabric!r}")
    fab = FABRICS[gpu]
    per_node = gpus_per_node or catalog()[gpu].gpus_per_vm
    inter = links[fab[fabric]] if fab[fabric] else None
    compute = batch_per_gpu / samples_per_sec_1gpu
    stream = gradients if gradients is not None else resnet50_gradients(image_size)
    if not 0 <= forward_traffic < traffic:
        raise AnalysisError(f"forward_traffic must be within [0, traffic), got {forward_traffic} of {traffic}")
    units = forward_units(stream) if forward_traffic else []
    backward_traffic = traffic - forward_traffic
    if backward_traffic != 1.0:
        # An engine that moves more than one allreduce of the gradients in backward (FSDP2: the parameters gathered
        # again and the gradients reduce-scattered) is priced as a stream of that many more bytes, each part where its
        # gradient is ready: the fused-operation rule below then charges every byte on the shared cores.
        stream = [replace(g, params=round(g.params * backward_traffic)) for g in stream]
    nbytes = gradient_bytes(precision, sum(g.params for g in stream))
    busy = 0.0  # the part of the allreduce that holds a CPU core (CPU workers only)
    hidden = overlap * BACKWARD_FRACTION * compute
    shared_cores = catalog()[gpu].is_cpu and measured is not None and measured.usable and gpus > 1
    if measured is not None and measured.usable:
        comm, source = measured.allreduce_s(gpus, nbytes), "measured"
        if shared_cores and measured.cpu_share is not None:
            busy = min(1.0, measured.cpu_share) * comm
    else:
        comm = allreduce_s(gpus, per_node, nbytes, links[fab["intra"]], inter, path,
                           links.get("host-stage-vm", LINKS["host-stage-vm"]))
        source = "data sheet"
    if shared_cores and measured.per_operation_measured:
        # Horovod's fused operations, each priced by its size's measured stretch and compute rate (fusion.py).
        idle, backward = measured.idle_compute_ratio, BACKWARD_FRACTION * compute
        cycle, threshold = fusion or (DEFAULT_CYCLE_S, DEFAULT_THRESHOLD_BYTES)
        op_shared = lambda n: measured.shared_operation(gpus, n)  # noqa: E731
        pace = idle
        if measured.replay_compute_ratio is not None:
            # The backward pass's pace was measured beside its own gradient stream: it holds whatever is in flight.
            pace = measured.replay_compute_ratio
            op_shared = lambda n: (measured.shared_operation(gpus, n)[0], pace)  # noqa: E731
        schedule = simulate_shared(stream, backward, op_shared,
                                   lambda n: measured.operation_s(gpus, n), idle_rate=pace, cycle_s=cycle,
                                   threshold_bytes=threshold, bytes_per_param=BYTES_PER_GRADIENT[precision])
        comm = schedule.busy_s
        step = (compute - backward) / idle + schedule.backward_s + schedule.tail_s
        source += (", backward paced beside a replay of its gradient stream"
                   if measured.replay_compute_ratio is not None else ", contention measured per operation")
    elif shared_cores and measured.contention_measured:
        comm *= measured.contended_stretch
        idle, during = measured.idle_compute_ratio, measured.contended_compute_ratio
        step = (compute - hidden) / idle + comm + max(0.0, hidden - during * comm) / idle
        source += ", contention measured"
    else:
        step = compute + busy + max(0.0, comm - busy - hidden)
    if units and gpus > 1:
        # FSDP2's forward all-gathers, one per unit, each priced as the allreduce that moves its bytes. A GPU issues
        # the next unit's gather on its own stream while this one computes, so the forward pass hides them up to its
        # length; a CPU worker (Gloo) waits for each before the unit computes, with nothing running ahead.
        gathers = [forward_traffic * gradient_bytes(precision, n) for n in units]
        if measured is not None and measured.usable:
            alone = (lambda n: measured.operation_s(gpus, n)) if shared_cores and measured.per_operation_measured \
                else (lambda n: measured.allreduce_s(gpus, n))
        else:
            alone = lambda n: allreduce_s(gpus, per_node, n, links[fab["intra"]], inter, path,  # noqa: E731
                                          links.get("host-stage-vm", LINKS["host-stage-vm"]))
        forward_wait = sum(alone(n) for n in gathers)
        if not catalog()[gpu].is_cpu:
            forward_wait = max(0.0, forward_wait - (1 - BACKWARD_FRACTION) * compute)
        comm += forward_wait
        step += forward_wait
    exposed = step - compute
    return Prediction(gpus, math.ceil(gpus / per_node), fabric, path, compute, comm, exposed, step,
                      gpus * batch_per_gpu / step, compute / step, source)


# --- for the report: prediction next to measurement ---------------------------------------------------------------

def predict_table(scaled, fits: Mapping[tuple, Any] | None = None, *, host_path_mpis: Collection[str]):
    """Adds predicted_samples_per_sec / predicted_efficiency to rows of `analysis.scaling.scaling()` whose series has
    a 1-worker baseline on a GPU the model knows. `host_path_mpis`: the MPI flavours that reach InfiniBand without
    SR-IOV (Intel MPI, through DAPL; the caller asks bench.launch): they use the host path on such a SKU (as in 2018),
    everything else NCCL. Rows it cannot predict get NaN.

    `fits`: collectives.fit_stacks() of the store's allreduce rows. A row whose stack has a usable fit is predicted
    from it (cpu cells too: their links are then measured, not guessed); `predicted_links` says which values each
    prediction used, and why a measured fit was passed over."""
    import pandas as pd

    from bench.analysis.collectives import stack_of
    from bench.facts.catalog import catalog

    out = scaled.copy()
    pred_x, pred_e, used = [], [], []
    for _, r in out.iterrows():
        x = e = float("nan")
        source = None
        fit = (fits or {}).get(stack_of(r)) if all(k in r for k in ("engine", "nodes")) else None
        measured = fit if fit is not None and fit.usable else None
        known = r["gpu"] in FABRICS and (r["gpu"] != "cpu" or measured is not None)
        if known and r.get("baseline_gpus") == 1 and pd.notna(r.get("baseline_samples_per_sec")):
            fabric = "ib" if r["ib"] else "tcp"
            host = r["mpi"] in host_path_mpis and not catalog()[r["gpu"]].sriov
            route = "host" if host else "nccl"
            try:
                p = predict(r["gpu"], int(r["gpus"]), float(r["baseline_samples_per_sec"]), samples_per_step(r),
                            fabric=fabric, path=route, precision=r.get("precision") or "fp32",
                            gpus_per_node=_per_node(r) if measured else None, measured=measured,
                            image_size=image_size_of(r), **step_of(r))
                x, e = p.samples_per_sec, p.efficiency
                source = p.links
                if fit is not None and not fit.usable:
                    source += f" (measured fit unusable: {fit.reason})"
            except (ValueError, KeyError):
                pass
        pred_x.append(x)
        pred_e.append(e)
        used.append(source)
    out["predicted_samples_per_sec"] = pred_x
    out["predicted_efficiency"] = pred_e
    out["predicted_links"] = used
    return out


def image_size_of(row) -> int:
    """A table row's image side (the fused operations' ready times depend on it a little), else ResNet-50's 224."""
    try:
        return int(row["image_size"])
    except (KeyError, TypeError, ValueError):
        return 224


def _per_node(row) -> int | None:
    """Workers per node of a table row, when it spans nodes (else the catalogue's VM decides)."""
    try:
        nodes, gpus = int(row["nodes"]), int(row["gpus"])
    except (KeyError, TypeError, ValueError):
        return None
    return math.ceil(gpus / nodes) if nodes > 1 else None
