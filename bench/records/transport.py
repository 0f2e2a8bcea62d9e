"""Which transport a job really used, read from its debug output.

The `ib` axis is what a cell *asked* for. Each communication layer can print what it *chose*: NCCL (GPU gradients),
the MPI flavour (CPU gradients, and Horovod's control plane), UCX under Open MPI/MPICH, libfabric under Intel MPI and
MPICH, PyTorch's own Gloo backend (the CPU tensors of the torch.distributed engines: DDP, FSDP2, layout cells).
`debug_env_for` turns that output on at a modest volume; `parse_log` reads a job's log into one of `ib`, `tcp`, `shm`
or `unknown` and keeps the line that decided; `verdict`/`mismatch` compare it with the request.

This module holds what every layer shares (the vocabulary, the deciding rules, the UCX, libfabric, NCCL and PyTorch
Gloo readers); each MPI flavour's own reader is its `parse` (bench/launch/<flavour>.py). It is pure: it reads text and
is handed the flavour (`Reader`); it knows no registry. bench.launch.evidence looks a cell's flavour up by name and
asks this module.

Rules shared by every layer:
- Only lines that report a *selection* count (a chosen provider, a per-peer BTL, an endpoint configuration, a channel);
  candidate lists, versions and failed attempts never decide.
- Multi-node: only inter-node evidence decides; if the log shows only intra-node paths the answer is `unknown`.
  Single node: what the ranks used among themselves (normally `shm`).
- Several paths of one scope: the slowest decides (tcp < ib < shm), so one peer on TCP in an "IB" job shows up.
- Nothing decisive: `unknown`. Never `ib` by default.
Log lines may carry launcher prefixes (`[1,0]<stderr>:` from `mpirun --tag-output`, `[0]<stdout>:` from horovodrun).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Protocol


class Effective(str, Enum):
    IB = "ib"
    TCP = "tcp"
    SHM = "shm"
    UNKNOWN = "unknown"


class Verdict(str, Enum):
    MATCH = "match"
    MISMATCH = "mismatch"
    UNKNOWN = "unknown"  # the log did not show the path that matters; neither a match nor a mismatch


# The shared layers' switches that make them name their transport once, at start-up (volumes measured 2026-11-22,
# 2 ranks). Each MPI flavour's own switches are its module's `debug` (bench/launch/<flavour>.py).
SHARED_DEBUG_ENV: dict[str, dict[str, str]] = {
    # INIT prints the net plugin ("NET/IB : Using ...", "Using network IB") and one line per channel and peer
    # ("... via P2P/IPC", "... [send] via NET/IB/0"); NET adds the network's device lines. No per-step output.
    "nccl": {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"},
    # info prints each endpoint configuration once ("ep_cfg[1]: tag(rc_mlx5/mlx5_0:1)" in UCX <= 1.13,
    # "ucp_context_0 inter-node cfg#2 tag(...)" in newer ones) plus a few start-up lines per rank.
    "ucx": {"UCX_LOG_LEVEL": "info"},
}

# PyTorch's own Gloo backend, under the torch.distributed engines (DDP, FSDP2, layout cells) on CPU, whatever launcher
# started them. At INFO Gloo's transport prints one line per process group and rank when its pairs are connected, from
# its own source file, e.g. "[.../gloo/transport/tcp/context.cc:243] INFO Rank 0 is connected to 1. Expected number of
# connected peers is: 1" (torch 2.13.0); nothing per step. Not a key of SHARED_DEBUG_ENV: no flavour sits on it, a
# cell's engine does (debug_env_for's torch_distributed).
TORCH_GLOO_DEBUG_ENV: dict[str, str] = {"GLOO_LOG_LEVEL": "INFO"}


@dataclass(frozen=True)
class Transport:
    effective: str  # Effective value: ib | tcp | shm | unknown
    evidence: str | None  # the trimmed log line that decided (launcher prefix removed); None if nothing decided
    layer: str | None  # nccl | openmpi | ucx | intelmpi | mpich | gloo | torch-gloo; None when nothing decided


UNKNOWN = Transport(Effective.UNKNOWN.value, None, None)


class Reader(Protocol):
    """What this module needs of an MPI flavour (bench.launch.flavour.Flavour is one)."""
    debug: dict[str, str]  # its own switches
    layers: tuple[str, ...]  # the shared layers under it (keys of SHARED_DEBUG_ENV) whose output counts

    def parse(self, lines: list[str], nodes: int | None) -> Transport:
        """Its reading of log lines with launcher prefixes removed."""
        ...


def debug_env_for(flavour: Reader, gpu: bool, torch_distributed: bool = False) -> dict[str, str]:
    """The env vars a cell's job needs so its log names the transport: the flavour's own switches, those of the
    shared layers it sits on (UCX under Open MPI and MPICH), and NCCL's on GPU cells.

    GPU cells also get NCCL's: Horovod's GPU allreduce runs over NCCL under every controller (MPI or Gloo), so NCCL
    carries the gradients; the MPI layer still carries the control plane (and is the fallback when NCCL is silent).
    A torch.distributed engine's CPU cells (`torch_distributed`) also get PyTorch Gloo's (TORCH_GLOO_DEBUG_ENV).
    """
    env = dict(flavour.debug)
    for layer in flavour.layers + (("nccl",) if gpu else ()):
        env.update(SHARED_DEBUG_ENV[layer])
    if torch_distributed and not gpu:
        env.update(TORCH_GLOO_DEBUG_ENV)
    return env


# --- shared machinery -------------------------------------------------------------------------------------------

_PREFIX = re.compile(r"^(?:\[\d+(?:,\d+)?\]<(?:stdout|stderr)>:)+\s?")
_SLOWEST_FIRST = {"tcp": 0, "ib": 1, "shm": 2}


@dataclass(frozen=True)
class Seen:
    kind: str  # ib | tcp | shm | other (a network that is none of them: EFA, Omni-Path...)
    scope: str  # inter | intra | any (scope not stated by the line)
    line: str
    layer: str


def clean_lines(log: str) -> list[str]:
    return [_PREFIX.sub("", raw).strip() for raw in log.splitlines()]


def slowest(seen: list[Seen]) -> Transport:
    """The slowest known path among `seen` (first such line as evidence); `other` paths alone give unknown."""
    known = [s for s in seen if s.kind in _SLOWEST_FIRST]
    if known:
        pick = min(known, key=lambda s: _SLOWEST_FIRST[s.kind])  # min is stable: earliest line of that kind
        return Transport(pick.kind, pick.line, pick.layer)
    if seen:  # e.g. EFA or Omni-Path: the log is clear, but it is none of our vocabulary
        return Transport(Effective.UNKNOWN.value, seen[0].line, seen[0].layer)
    return UNKNOWN


def decide(seen: list[Seen], multi: bool | None) -> Transport:
    """Inter-node evidence for multi-node jobs; intra-node evidence (else unscoped) for single-node ones."""
    if multi:
        inter = [s for s in seen if s.scope == "inter"]
        # An unscoped network path (UCX <= 1.13 ep_cfg, a libfabric provider) is what crosses nodes; shm cannot.
        return slowest(inter or [s for s in seen if s.scope == "any" and s.kind != "shm"])
    intra = [s for s in seen if s.scope == "intra"]
    if multi is None:  # node count unknown and no inter-node line seen: report what ranks used among themselves
        return slowest(intra or [s for s in seen if s.scope == "any"] or seen)
    return slowest(intra or [s for s in seen if s.scope == "any"])


def short_host(host: str) -> str:
    return host.split(".", 1)[0].lower()


def multi_node(nodes: int | None, hosts: set[str]) -> bool | None:
    """The cell's node count when given; otherwise True if the log named several hosts, else not known."""
    if nodes is not None:
        return nodes > 1
    return True if len(hosts) > 1 else None


# --- UCX (under Open MPI's pml ucx and MPICH's ch4:ucx) ---------------------------------------------------------

# UCX <= 1.13: "ucp_worker.c:1763 UCX  INFO    ep_cfg[1]: tag(sysv/memory cma/memory) ..."
# UCX >= 1.14: "ucp_worker.c:1912 UCX  INFO    ucp_context_0 inter-node cfg#2 tag(rc_mlx5/mlx5_0:1) ..."
_UCX_CFG = re.compile(r"UCX\s+INFO\s+(?:ep_cfg\[\d+\]:|\S+\s+(self|intra-node|inter-node)\s+cfg#\d+)\s+(.*)$")
_UCX_TAG = re.compile(r"\btag\(([^)]*)\)")
_UCX_IB = re.compile(r"^(?:rc|dc|ud|rc_verbs|rc_mlx5|dc_mlx5|ud_verbs|ud_mlx5|gga_mlx5)$")
_UCX_SHM = {"sysv", "posix", "cma", "knem", "xpmem", "cuda_ipc", "rocm_ipc", "ze_ipc"}


def _ucx_kind(lanes: str) -> str | None:
    tls = {lane.split("/", 1)[0] for lane in lanes.split()}
    if "self" in tls:
        return None  # the endpoint a rank opens to itself (UCX <= 1.13 does not label it)
    if any(_UCX_IB.match(tl) for tl in tls):
        return "ib"
    if "tcp" in tls:
        return "tcp"
    if tls & _UCX_SHM:
        return "shm"
    if tls - {"self", "cuda_copy", "rocm_copy", "ze_copy"}:
        return "other"  # e.g. srd (EFA)
    return None  # loopback to itself only


def ucx_paths(lines: list[str]) -> list[Seen]:
    seen = []
    for line in lines:
        m = _UCX_CFG.search(line)
        if not m or m.group(1) == "self":
            continue
        tag = _UCX_TAG.search(m.group(2))
        kind = _ucx_kind(tag.group(1) if tag else m.group(2))
        if kind:
            scope = {"intra-node": "intra", "inter-node": "inter"}.get(m.group(1) or "", "any")
            seen.append(Seen(kind, scope, line, "ucx"))
    return seen


# --- libfabric providers (Intel MPI, MPICH ch4:ofi) -------------------------------------------------------------

def ofi_kind(provider: str) -> str:
    core = provider.lower().split(";", 1)[0]  # "verbs;ofi_rxm" -> verbs; the utility provider does not matter
    if core in ("mlx", "verbs"):
        return "ib"
    if core in ("tcp", "sockets", "udp"):
        return "tcp"
    if core in ("shm", "sm2"):
        return "shm"
    return "other"  # psm2/psm3 (Omni-Path, Ethernet), efa, cxi, opx...


# --- NCCL ------------------------------------------------------------------------------------------------------

_NCCL_CHANNEL_NET = re.compile(r"NCCL INFO Channel \d+(?:/\d+)? : .*\bvia NET/([A-Za-z][\w-]*)")
_NCCL_CHANNEL_LOCAL = re.compile(r"NCCL INFO Channel \d+(?:/\d+)? : .*\bvia (?:P2P|SHM)/")
_NCCL_NETWORK = re.compile(r"NCCL INFO (?:Using network (\w+)|NET/(IB|Socket)\s*: Using \[)")
_NCCL_NNODES = re.compile(r"NCCL INFO .*\bnNodes (\d+)")


def _nccl_kind(name: str) -> str:
    if name.startswith("IB"):  # IB, IBext (HPC-X/SHARP plugin); RoCE also reports as NET/IB: RDMA verbs either way
        return "ib"
    if name == "Socket":
        return "tcp"
    return "other"  # e.g. "AWS Libfabric" (EFA)


def _nccl(lines: list[str], nodes: int | None) -> Transport | None:
    nccl = [ln for ln in lines if "NCCL INFO" in ln]
    if not nccl:
        return None
    net = [Seen(_nccl_kind(m.group(1)), "inter", ln, "nccl") for ln in nccl if (m := _NCCL_CHANNEL_NET.search(ln))]
    local = [Seen("shm", "intra", ln, "nccl") for ln in nccl if _NCCL_CHANNEL_LOCAL.search(ln)]
    chosen = [(m.group(1) or m.group(2), ln) for ln in nccl if (m := _NCCL_NETWORK.search(ln))]
    if nodes is None:
        counts = [int(m.group(1)) for ln in nccl if (m := _NCCL_NNODES.search(ln))]
        nodes = max(counts) if counts else None
    if nodes is not None and nodes > 1:
        if net:  # the channels that cross nodes decide; P2P/SHM lines are the intra-node part of the same rings
            return slowest(net)
        if chosen:  # no channel lines (e.g. SUBSYS without INIT): NCCL sends all inter-node traffic on this network
            name, line = chosen[-1]  # "Using network X" comes after the plugin's "NET/X : Using [...]" line
            return slowest([Seen(_nccl_kind(name), "inter", line, "nccl")])
        return UNKNOWN
    # One node (or node count not known): what the channels used. NCCL initialises its network plugin even on one
    # node, so "NET/IB : Using [0]mlx5_0..." alone proves nothing here.
    return slowest(net) if net else slowest(local)


# --- PyTorch's Gloo backend (torch.distributed on CPU) ---------------------------------------------------------

# "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/context.cc:243] INFO Rank 0 is connected to 1. Expected
# number of connected peers is: 1": the directory names the Gloo transport that connected the group. torch's Linux
# wheels build only gloo::transport::tcp (uv is libuv's TCP; ibverbs is Gloo's RDMA transport, not in the wheels).
_TORCH_GLOO = re.compile(r"gloo/transport/(\w+)/context\.cc:\d+\]\s+INFO Rank \d+ is connected to \d+\. "
                         r"Expected number of connected peers is: (\d+)")
_GLOO_TRANSPORT_KIND = {"tcp": "tcp", "tcp_tls": "tcp", "uv": "tcp", "ibverbs": "ib"}


def torch_gloo_paths(lines: list[str]) -> list[Seen]:
    """One path per process group and rank that has peers. The line does not say whether a peer is on this node or
    another (loopback TCP on one node is still TCP), nor which process group it is: unscoped, not per group."""
    seen = []
    for line in lines:
        m = _TORCH_GLOO.search(line)
        if m and int(m.group(2)) > 0:  # a group of one rank (a mesh dimension of degree 1) connects nothing
            seen.append(Seen(_GLOO_TRANSPORT_KIND.get(m.group(1), "other"), "any", line, "torch-gloo"))
    return seen


# --- entry points --------------------------------------------------------------------------------------------------

def parse_log(log: str, flavour: Reader, gpu: bool, nodes: int | None = None,
              torch_distributed: bool = False) -> Transport:
    """The transport a job used, from its combined log (all ranks, any launcher prefixes).

    `nodes` is the cell's node count; when None it is inferred from the log where the layer says (Open MPI peer hosts,
    Intel MPI's pinning table, NCCL's nNodes, UCX's inter-node configurations) and otherwise left open.
    GPU cells: NCCL decides when it printed anything; the MPI layer only when NCCL is silent.
    A torch.distributed engine's cells (`torch_distributed`: DDP, FSDP2, layouts) move their tensors over
    torch.distributed's backend, NCCL on GPU and PyTorch's Gloo on CPU; the launcher (torchrun, mpirun) only starts
    the processes, so the flavour's reading never decides them: without that backend's lines they are unknown.
    """
    lines = clean_lines(log)
    if gpu and (found := _nccl(lines, nodes)) is not None:
        return found
    if torch_distributed:
        return UNKNOWN if gpu else decide(torch_gloo_paths(lines), None if nodes is None else nodes > 1)
    return flavour.parse(lines, nodes)


def verdict(requested: str | bool, effective: str, *, nodes: int) -> Verdict:
    """Compare the requested fabric (`ib` axis: True/"ib" or False/"tcp") with the effective transport.

    shm on one node matches either request: nothing crosses a fabric. shm on several nodes means the log showed only
    the intra-node side, so it is unknown, not a match.
    """
    want = ("ib" if requested else "tcp") if isinstance(requested, bool) else requested
    if want not in ("ib", "tcp"):
        raise ValueError(f"requested={requested!r}: expected ib or tcp")
    if effective not in {e.value for e in Effective}:
        raise ValueError(f"effective={effective!r}: expected one of ib, tcp, shm, unknown")
    if effective == Effective.UNKNOWN.value:
        return Verdict.UNKNOWN
    if effective == Effective.SHM.value:
        return Verdict.MATCH if nodes == 1 else Verdict.UNKNOWN
    return Verdict.MATCH if effective == want else Verdict.MISMATCH


def mismatch(requested: str | bool, effective: str, *, nodes: int) -> bool:
    """True only for a proven mismatch; `verdict` tells an unknown apart from a match."""
    return verdict(requested, effective, nodes=nodes) is Verdict.MISMATCH
