"""MPICH: Hydra's mpiexec, ch4 on UCX, its debug summary, the MPICH-ABI environment (the MPICH wheel)."""
from __future__ import annotations

import re

from bench.launch.fabric import ucx_env
from bench.launch.flavour import ImageRecipe
from bench.launch.hydra import HydraFlavour
from bench.launch.spec import LaunchSpec
from bench.records.transport import Effective, Seen, Transport, decide, multi_node, ofi_kind, ucx_paths

# ch4:ofi summary: "libfabric provider: tcp - 192.0.2.0/24" (4.1+); the candidate list ("provider: tcp, score = 4")
# is not a choice and must not match.
_PROVIDER = re.compile(r"^(?:libfabric provider|Provider name):\s*([^\s,]+)")
_SHM = re.compile(r"^MPID/shm:\s*MPIDI_POSIX")


class MPICH(HydraFlavour):
    name = "mpich"
    title = "MPICH"
    progress_threads = "MPICH's threads"
    stand_in_rank = 2
    mpi_operator_implementation = "MPICH"
    # Rank 0 prints "libfabric provider: <name> - <fabric>" (ch4:ofi) or "==== UCX netmod Capability ====" (ch4:ucx)
    # and "MPID/shm: MPIDI_POSIX..." when the shared-memory module is on; ~40-110 lines once.
    # MPIR_CVAR_CH4_OFI_CAPABILITY_SETS_DEBUG adds nothing the summary does not print (checked with MPICH 5.0.2).
    debug = {"MPIR_CVAR_DEBUG_SUMMARY": "1"}
    layers = ("ucx",)
    # The wheel carries libmpi.so.12, Hydra and the mpicxx that builds the MPICH-ABI Horovod (scripts/install.sh).
    image = ImageRecipe(wheel="mpich==5.0.2")

    def fabric_env(self, spec: LaunchSpec) -> dict[str, str]:
        """The wheel's default netmod is ch4:ucx, so the fabric is chosen through UCX."""
        return {"MPIR_CVAR_CH4_NETMOD": "ucx", **ucx_env(spec)}

    def ssh_options(self, ssh_args: list[str]) -> tuple[list[str], dict[str, str]]:
        # Hydra splits HYDRA_LAUNCHER_EXTRA_ARGS on spaces and puts the words between ssh and the host (its
        # external_common_launch.c; checked with MPICH 5.0.2 and a recording stand-in for ssh). Its -help lists no
        # option for them. mpiexec reads it itself: the launcher's environment, not -genv.
        return [], {"HYDRA_LAUNCHER_EXTRA_ARGS": " ".join(ssh_args)}

    def parse(self, lines: list[str], nodes: int | None) -> Transport:
        seen = ucx_paths(lines)
        for line in lines:
            if m := _PROVIDER.search(line):
                seen.append(Seen(ofi_kind(m.group(1)), "any", line, self.name))
        multi = multi_node(nodes, {"here", "there"} if any(s.scope == "inter" for s in seen) else set())
        if not multi:
            # ch4's POSIX shared-memory module carries traffic between ranks of one node, whatever the netmod offers.
            shm = next((ln for ln in lines if _SHM.search(ln)), None)
            if shm and multi is False:
                return Transport(Effective.SHM.value, shm, self.name)
        return decide(seen, multi)


FLAVOUR = MPICH()
