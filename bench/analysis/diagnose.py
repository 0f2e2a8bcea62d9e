"""Which node or link is slow: outlier rules over `bench diagnose`'s probe figures (pure: figures in, findings out).

Compute. Every node runs the same single-threaded kernel at the same moments (ROUNDS rounds, each started at one
wall-clock time on every node): a load that comes and goes on the machine running the probes (here: other jobs on
the same 2 cores) hits every node's round alike, and a ratio taken within a round cancels it. In each round a node's
rate is divided by the median rate of the nodes that do not share a CPU with it; its ratio is the median over
rounds, and it is named under COMPUTE_BELOW. Sharing: two nodes on one machine (the same machine id) whose allowed
CPUs overlap run their probes on the same cores at once and split them, so each counts as (1 + its co-tenants) × its
rate — on the emulated cluster, 4 nodes pinned on 2 CPUs share in pairs (nodes 1 and 3 on CPU 0, 2 and 4 on CPU 1).
A busy process on node3's core slows node1's probe as much as node3's: both are named, and comparing a node with its
co-tenants would have hidden the very core that is slow. The finding says which nodes share the core, and how much
CPU the node's own other processes used while it was probed (a process on node3 is seen from node3 only), so the
node that holds the load is told apart from the one that shares its core.

Links. Every ordered pair is measured once (a sender, a receiver timing what arrives): a link's figure is its slower
direction. A link is named when that figure is under LINK_BELOW × the median of all directed measurements (with one
node's egress slow, 3 of 12 directions are slow and the median stays the healthy rate). A node is named for its
network when every one of its links (at least two) is named.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Mapping

COMPUTE_BELOW = 0.70
LINK_BELOW = 0.60
ROUNDS = 3
BUSY_OTHERS = 0.05  # CPU-s/s of other processes on a node worth naming (a quiet node: sshd and init, ~0)


@dataclass(frozen=True)
class NodeCompute:
    host: str
    rate: float  # probe kernels per second, median over rounds
    ratio: float  # median over rounds of its (sharing-counted) rate over the median of the nodes apart from it
    cpus: frozenset[int]
    machine: str | None  # which machine (diag_probe: the machine id)
    others_cpu_s_per_s: float  # the node's other processes while it was probed, median over rounds
    sharing: tuple[str, ...] = ()  # nodes on the same machine whose CPUs overlap its


@dataclass(frozen=True)
class Finding:
    kind: str  # "compute" | "link" | "node-network"
    subject: str  # the node, or "a–b"
    ratio: float
    text: str


def _shares(a: Mapping, b: Mapping) -> bool:
    return a.get("machine") is not None and a.get("machine") == b.get("machine") and \
        bool(set(a.get("cpus") or ()) & set(b.get("cpus") or ()))


def node_compute(rounds: Mapping[str, list[Mapping]]) -> dict[str, NodeCompute]:
    """host → its compute figures, from host → the rounds diag_probe's compute printed (round i of every host ran at
    the same moment)."""
    hosts = list(rounds)
    first = {h: rounds[h][0] for h in hosts if rounds[h]}
    mates = {h: tuple(m for m in hosts if m != h and h in first and m in first and _shares(first[h], first[m]))
             for h in hosts}
    n_rounds = min((len(r) for r in rounds.values()), default=0)
    ratios: dict[str, list[float]] = {h: [] for h in hosts}
    for i in range(n_rounds):
        # Probes that share a core run at once and split it: count each as the core it would have alone.
        norm = {h: float(rounds[h][i]["kernels_per_s"]) * (1 + len(mates[h])) for h in hosts}
        for h in hosts:
            apart = [norm[m] for m in hosts if m != h and m not in mates[h]] or [norm[m] for m in hosts if m != h]
            if apart:
                ratios[h].append(norm[h] / statistics.median(apart))
    out = {}
    for h in hosts:
        runs = rounds[h]
        out[h] = NodeCompute(h, statistics.median(float(r["kernels_per_s"]) for r in runs),
                             statistics.median(ratios[h]) if ratios[h] else 1.0,
                             frozenset(runs[0].get("cpus") or ()), runs[0].get("machine"),
                             statistics.median(float(r.get("others_cpu_s_per_s") or 0.0) for r in runs), mates[h])
    return out


def compute_findings(nodes: Mapping[str, NodeCompute], below: float = COMPUTE_BELOW) -> list[Finding]:
    """Nodes whose ratio is under `below`; the node with load of its own first."""
    out = []
    for host, n in nodes.items():
        if n.ratio >= below:
            continue
        notes = []
        if n.others_cpu_s_per_s >= BUSY_OTHERS:
            notes.append(f"other processes on {host} used {n.others_cpu_s_per_s:.2f} CPU-s/s meanwhile")
        if n.sharing:
            notes.append(f"shares CPU {','.join(map(str, sorted(n.cpus)))} with {', '.join(n.sharing)}")
        out.append(Finding("compute", host, n.ratio, f"{host}: compute {n.ratio:.2f}× the median"
                           + (f" ({'; '.join(notes)})" if notes else "")))
    return sorted(out, key=lambda f: (-nodes[f.subject].others_cpu_s_per_s, f.ratio))


def link_findings(directed: Mapping[tuple[str, str], float], below: float = LINK_BELOW) -> list[Finding]:
    """Links (unordered pairs) whose slower direction is under `below` × the median of every direction, then
    nodes every link of which is named. `directed`: (sender, receiver) → bytes/s."""
    if not directed:
        return []
    median = statistics.median(directed.values())
    pairs: dict[tuple[str, str], tuple[float, tuple[str, str]]] = {}
    for (a, b), bw in directed.items():
        key = tuple(sorted((a, b)))
        if key not in pairs or bw < pairs[key][0]:
            pairs[key] = (bw, (a, b))
    out, slow_links = [], {}
    for (a, b), (bw, (src, dst)) in sorted(pairs.items()):
        ratio = bw / median
        if ratio < below:
            slow_links[(a, b)] = ratio
            out.append(Finding("link", f"{a}–{b}", ratio,
                               f"link {a}–{b}: {ratio:.2f}× the median bandwidth ({src}→{dst} {bw / 1e6:.1f} MB/s, "
                               f"median {median / 1e6:.1f} MB/s)"))
    hosts = sorted({h for pair in pairs for h in pair})
    for host in hosts:
        mine = [p for p in pairs if host in p]
        if len(mine) >= 2 and all(p in slow_links for p in mine):
            ratios = [slow_links[p] for p in mine]
            out.append(Finding("node-network", host, max(ratios),
                               f"{host}: every link slow ({min(ratios):.2f}–{max(ratios):.2f}× the median "
                               f"bandwidth): {host}'s network"))
    return out
