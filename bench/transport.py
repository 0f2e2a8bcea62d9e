"""Which transport a job really used, read from its debug output.

The `ib` axis is what a cell *asked* for. Each communication layer can print what it *chose*: NCCL (GPU gradients),
the MPI flavour (CPU gradients, and Horovod's control plane), UCX under Open MPI/MPICH, libfabric under Intel MPI and
MPICH. `debug_env` turns that output on at a modest volume; `parse_transport` reads a job's log into one of
`ib`, `tcp`, `shm` or `unknown` and keeps the line that decided; `verdict`/`mismatch` compare it with the request.

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


class Effective(str, Enum):
    IB = "ib"
    TCP = "tcp"
    SHM = "shm"
    UNKNOWN = "unknown"


class Verdict(str, Enum):
    MATCH = "match"
    MISMATCH = "mismatch"
    UNKNOWN = "unknown"  # the log did not show the path that matters; neither a match nor a mismatch


# Per layer, the env vars that make it name its transport once, at start-up (volumes measured 2026-11-22, 2 ranks).
DEBUG_ENV: dict[str, dict[str, str]] = {
    # INIT prints the net plugin ("NET/IB : Using ...", "Using network IB") and one line per channel and peer
    # ("... via P2P/IPC", "... [send] via NET/IB/0"); NET adds the network's device lines. No per-step output.
    "nccl": {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"},
    # btl_base_verbose=1 prints only "mca: bml: Using <btl> btl for send to <peer> on node <host>" (one line per peer
    # and rank: N^2 lines, once). pml_ucx_verbose=1 names the UCX pml when it is chosen (4 lines per rank).
    # pml_base_verbose=10 would also name the chosen pml, but with ~30 component lines per rank: left out.
    "openmpi": {"OMPI_MCA_btl_base_verbose": "1", "OMPI_MCA_pml_ucx_verbose": "1"},
    # info prints each endpoint configuration once ("ep_cfg[1]: tag(rc_mlx5/mlx5_0:1)" in UCX <= 1.13,
    # "ucp_context_0 inter-node cfg#2 tag(...)" in newer ones) plus a few start-up lines per rank.
    "ucx": {"UCX_LOG_LEVEL": "info"},
    # Level 5 prints "libfabric provider: <name>" and the rank/node pinning table; level 6 adds "single node launch
    # is detected ... Defaulting to shm fabric.", which is the only proof of shm on one node. Rank 0 prints, ~30 lines.
    "intelmpi": {"I_MPI_DEBUG": "6"},
    # Rank 0 prints "libfabric provider: <name> - <fabric>" (ch4:ofi) or "==== UCX netmod Capability ====" (ch4:ucx)
    # and "MPID/shm: MPIDI_POSIX..." when the shared-memory module is on; ~40-110 lines once.
    # MPIR_CVAR_CH4_OFI_CAPABILITY_SETS_DEBUG adds nothing the summary does not print (checked with MPICH 5.0.2).
    "mpich": {"MPIR_CVAR_DEBUG_SUMMARY": "1"},
    # Horovod's debug level prints the Gloo device ("dev={tcp, ..., iface=lo, ...}"): ~28 lines per rank, at init
    # only (the same 57 lines for 2 ranks after 1 or 300 allreduces).
    "gloo": {"HOROVOD_LOG_LEVEL": "debug"},
}

# Which layers speak for each MPI flavour. Open MPI and MPICH may sit on UCX; Intel MPI sits on libfabric, whose
# choice it prints itself. Horovod 0.28.1's Gloo controller always builds a gloo::transport::tcp device on Linux
# (horovod/common/gloo/gloo_context.cc: `#ifdef __linux__ ... gloo::transport::tcp::CreateDevice`; libuv only on
# macOS), for every rendezvous, even when all ranks share one machine: Gloo's own traffic is always TCP.
_LAYERS = {"openmpi": ("openmpi", "ucx"), "mpich": ("mpich", "ucx"), "intelmpi": ("intelmpi",), "gloo": ("gloo",)}


def debug_env(mpi: str, gpu: bool) -> dict[str, str]:
    """The env vars a cell's job needs so its log names the transport.

    GPU cells also get NCCL's: Horovod's GPU allreduce runs over NCCL under every controller (MPI or Gloo), so NCCL
    carries the gradients; the MPI layer still carries the control plane (and is the fallback when NCCL is silent).
    """
    try:
        layers = _LAYERS[mpi]
    except KeyError:
        raise ValueError(f"mpi={mpi!r}: expected one of {', '.join(sorted(_LAYERS))}") from None
    env: dict[str, str] = {}
    for layer in layers + (("nccl",) if gpu else ()):
        env.update(DEBUG_ENV[layer])
    return env


@dataclass(frozen=True)
class Transport:
    effective: str  # Effective value: ib | tcp | shm | unknown
    evidence: str | None  # the trimmed log line that decided (launcher prefix removed); None if nothing decided
    layer: str | None  # nccl | openmpi | ucx | intelmpi | mpich | gloo; None when nothing decided


UNKNOWN = Transport(Effective.UNKNOWN.value, None, None)

# --- shared machinery -------------------------------------------------------------------------------------------

_PREFIX = re.compile(r"^(?:\[\d+(?:,\d+)?\]<(?:stdout|stderr)>:)+\s?")
_SLOWEST_FIRST = {"tcp": 0, "ib": 1, "shm": 2}


@dataclass(frozen=True)
class _Seen:
    kind: str  # ib | tcp | shm | other (a network that is none of them: EFA, Omni-Path...)
    scope: str  # inter | intra | any (scope not stated by the line)
    line: str
    layer: str


def _clean(log: str) -> list[str]:
    return [_PREFIX.sub("", raw).strip() for raw in log.splitlines()]


def _slowest(seen: list[_Seen]) -> Transport:
    """The slowest known path among `seen` (first such line as evidence); `other` paths alone give unknown."""
    known = [s for s in seen if s.kind in _SLOWEST_FIRST]
    if known:
        pick = min(known, key=lambda s: _SLOWEST_FIRST[s.kind])  # min is stable: earliest line of that kind
        return Transport(pick.kind, pick.line, pick.layer)
    if seen:  # e.g. EFA or Omni-Path: the log is clear, but it is none of our vocabulary
        return Transport(Effective.UNKNOWN.value, seen[0].line, seen[0].layer)
    return UNKNOWN


def _decide(seen: list[_Seen], multi: bool | None) -> Transport:
    """Inter-node evidence for multi-node jobs; intra-node evidence (else unscoped) for single-node ones."""
    if multi:
        inter = [s for s in seen if s.scope == "inter"]
        # An unscoped network path (UCX <= 1.13 ep_cfg, a libfabric provider) is what crosses nodes; shm cannot.
        return _slowest(inter or [s for s in seen if s.scope == "any" and s.kind != "shm"])
    intra = [s for s in seen if s.scope == "intra"]
    if multi is None:  # node count unknown and no inter-node line seen: report what ranks used among themselves
        return _slowest(intra or [s for s in seen if s.scope == "any"] or seen)
    return _slowest(intra or [s for s in seen if s.scope == "any"])


def _short(host: str) -> str:
    return host.split(".", 1)[0].lower()


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


def _ucx(lines: list[str]) -> list[_Seen]:
    seen = []
    for line in lines:
        m = _UCX_CFG.search(line)
        if not m or m.group(1) == "self":
            continue
        tag = _UCX_TAG.search(m.group(2))
        kind = _ucx_kind(tag.group(1) if tag else m.group(2))
        if kind:
            scope = {"intra-node": "intra", "inter-node": "inter"}.get(m.group(1) or "", "any")
            seen.append(_Seen(kind, scope, line, "ucx"))
    return seen


# --- libfabric providers (Intel MPI, MPICH ch4:ofi) -------------------------------------------------------------

def _ofi_kind(provider: str) -> str:
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
    net = [_Seen(_nccl_kind(m.group(1)), "inter", ln, "nccl") for ln in nccl if (m := _NCCL_CHANNEL_NET.search(ln))]
    local = [_Seen("shm", "intra", ln, "nccl") for ln in nccl if _NCCL_CHANNEL_LOCAL.search(ln)]
    chosen = [(m.group(1) or m.group(2), ln) for ln in nccl if (m := _NCCL_NETWORK.search(ln))]
    if nodes is None:
        counts = [int(m.group(1)) for ln in nccl if (m := _NCCL_NNODES.search(ln))]
        nodes = max(counts) if counts else None
    if nodes is not None and nodes > 1:
        if net:  # the channels that cross nodes decide; P2P/SHM lines are the intra-node part of the same rings
            return _slowest(net)
        if chosen:  # no channel lines (e.g. SUBSYS without INIT): NCCL sends all inter-node traffic on this network
            name, line = chosen[-1]  # "Using network X" comes after the plugin's "NET/X : Using [...]" line
            return _slowest([_Seen(_nccl_kind(name), "inter", line, "nccl")])
        return UNKNOWN
    # One node (or node count not known): what the channels used. NCCL initialises its network plugin even on one
    # node, so "NET/IB : Using [0]mlx5_0..." alone proves nothing here.
    return _slowest(net) if net else _slowest(local)


# --- Open MPI ----------------------------------------------------------------------------------------------------

_BML = re.compile(r"^\[([^:\]]+):\d+\] mca: bml: Using (\w+) btl for send to \S+ on node (\S+)")
_BTL_KIND = {"vader": "shm", "sm": "shm", "smcuda": "shm", "tcp": "tcp", "openib": "ib"}


def _openmpi(lines: list[str], nodes: int | None) -> Transport:
    seen, hosts = [], set()
    for line in lines:
        m = _BML.search(line)
        if not m or m.group(2) == "self":
            continue
        me, peer = _short(m.group(1)), _short(m.group(3))
        hosts.update((me, peer))
        seen.append(_Seen(_BTL_KIND.get(m.group(2), "other"), "intra" if me == peer else "inter", line, "openmpi"))
    seen += _ucx(lines)
    if any(s.scope == "inter" for s in seen):
        hosts.add("another")  # UCX >= 1.14 names inter-node configurations
    return _decide(seen, _multi(nodes, hosts))


def _multi(nodes: int | None, hosts: set[str]) -> bool | None:
    if nodes is not None:
        return nodes > 1
    return True if len(hosts) > 1 else None


# --- Intel MPI ---------------------------------------------------------------------------------------------------

_IMPI = re.compile(r"^\[\d+\] MPI startup\(\):\s*(.*)$")
_IMPI_PROVIDER = re.compile(r"^libfabric provider:\s*(\S+)")
_IMPI_PIN_ROW = re.compile(r"^\d+\s+\d+\s+(\S+)\s+\{")
_IMPI_FABRICS = re.compile(r"^I_MPI_FABRICS=(\S+)")


def _intelmpi(lines: list[str], nodes: int | None) -> Transport:
    provider = fabrics = shm_default = None
    hosts: set[str] = set()
    for line in lines:
        m = _IMPI.search(line)
        if not m:
            continue
        text = m.group(1)
        if p := _IMPI_PROVIDER.search(text):
            provider = (p.group(1), line)
        elif f := _IMPI_FABRICS.search(text):
            fabrics = (f.group(1).lower(), line)
        elif "Defaulting to shm fabric" in text:
            shm_default = line
        elif r := _IMPI_PIN_ROW.search(text):
            hosts.add(_short(r.group(1)))
    # The pinning table lists every rank with its node, so (unlike per-peer lines) it also proves a single node.
    multi = nodes > 1 if nodes is not None else (len(hosts) > 1 if hosts else None)
    if multi:
        return _slowest([_Seen(_ofi_kind(provider[0]), "inter", provider[1], "intelmpi")]) if provider else UNKNOWN
    if shm_default:
        return Transport(Effective.SHM.value, shm_default, "intelmpi")
    if provider is None:
        return UNKNOWN
    # One node with libfabric loaded: ranks on one node talk over shm unless I_MPI_FABRICS is "ofi" alone (the
    # default and "shm:ofi" keep shm inside a node). Intel MPI echoes I_MPI_FABRICS only when the user set it.
    if fabrics and fabrics[0] == "ofi":
        return _slowest([_Seen(_ofi_kind(provider[0]), "any", provider[1], "intelmpi")])
    if multi is False:
        return Transport(Effective.SHM.value, fabrics[1] if fabrics else provider[1], "intelmpi")
    return UNKNOWN  # node count unknown: the provider is only the inter-node fabric, and we cannot tell if it is used


# --- MPICH -------------------------------------------------------------------------------------------------------

# ch4:ofi summary: "libfabric provider: tcp - 192.0.2.0/24" (4.1+); the candidate list ("provider: tcp, score = 4")
# is not a choice and must not match.
_MPICH_PROVIDER = re.compile(r"^(?:libfabric provider|Provider name):\s*([^\s,]+)")
_MPICH_SHM = re.compile(r"^MPID/shm:\s*MPIDI_POSIX")


def _mpich(lines: list[str], nodes: int | None) -> Transport:
    seen = _ucx(lines)
    for line in lines:
        if m := _MPICH_PROVIDER.search(line):
            seen.append(_Seen(_ofi_kind(m.group(1)), "any", line, "mpich"))
    multi = _multi(nodes, {"here", "there"} if any(s.scope == "inter" for s in seen) else set())
    if not multi:
        # ch4's POSIX shared-memory module carries traffic between ranks of one node, whatever the netmod offers.
        shm = next((ln for ln in lines if _MPICH_SHM.search(ln)), None)
        if shm and multi is False:
            return Transport(Effective.SHM.value, shm, "mpich")
    return _decide(seen, multi)


# --- Gloo --------------------------------------------------------------------------------------------------------

_GLOO_DEV = re.compile(r"rendezvous started for rank=.*\bdev=\{(\w+),")


def _gloo(lines: list[str]) -> Transport:
    for line in lines:
        if m := _GLOO_DEV.search(line):
            return Transport("tcp" if m.group(1) in ("tcp", "uv") else Effective.UNKNOWN.value, line, "gloo")
    # Without Horovod's debug lines: the controller line still proves Gloo ran, and Gloo in Horovod is TCP on Linux.
    for line in lines:
        if "Using GLOO to perform controller operations" in line or "Gloo controller initialized" in line:
            return Transport(Effective.TCP.value, line, "gloo")
    return UNKNOWN


# --- entry points --------------------------------------------------------------------------------------------------

def parse_transport(log: str, mpi: str, gpu: bool, nodes: int | None = None) -> Transport:
    """The transport a job used, from its combined log (all ranks, any launcher prefixes).

    `nodes` is the cell's node count; when None it is inferred from the log where the layer says (Open MPI peer hosts,
    Intel MPI's pinning table, NCCL's nNodes, UCX's inter-node configurations) and otherwise left open.
    GPU cells: NCCL decides when it printed anything; the MPI layer only when NCCL is silent.
    """
    if mpi not in _LAYERS:
        raise ValueError(f"mpi={mpi!r}: expected one of {', '.join(sorted(_LAYERS))}")
    lines = _clean(log)
    if gpu and (found := _nccl(lines, nodes)) is not None:
        return found
    if mpi == "openmpi":
        return _openmpi(lines, nodes)
    if mpi == "intelmpi":
        return _intelmpi(lines, nodes)
    if mpi == "mpich":
        return _mpich(lines, nodes)
    return _gloo(lines)


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
