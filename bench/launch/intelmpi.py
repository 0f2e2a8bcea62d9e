"""Intel MPI: its mpiexec.hydra and fabrics, its startup log, the impi_rt runtime in its own prefix of the MPICH-ABI
environment (Intel MPI shares MPICH's libmpi.so.12, so it runs the MPICH-ABI Horovod)."""
from __future__ import annotations

import re

from bench.launch.fabric import iface_name
from bench.launch.flavour import ImageRecipe
from bench.launch.hydra import HydraFlavour
from bench.launch.spec import LaunchSpec
from bench.records.transport import UNKNOWN, Effective, Seen, Transport, ofi_kind, short_host, slowest

_STARTUP = re.compile(r"^\[\d+\] MPI startup\(\):\s*(.*)$")
_PROVIDER = re.compile(r"^libfabric provider:\s*(\S+)")
_PIN_ROW = re.compile(r"^\d+\s+\d+\s+(\S+)\s+\{")
_FABRICS = re.compile(r"^I_MPI_FABRICS=(\S+)")


class IntelMPI(HydraFlavour):
    name = "intelmpi"
    title = "Intel MPI"
    runtime_prefix = "opt/impi"  # inside the MPICH-ABI venv, as scripts/install.sh installs it
    ib_without_sriov = True  # through Network Direct and DAPL (fabric_env)
    # Level 5 prints "libfabric provider: <name>" and the rank/node pinning table; level 6 adds "single node launch
    # is detected ... Defaulting to shm fabric.", which is the only proof of shm on one node. Rank 0 prints, ~30 lines.
    debug = {"I_MPI_DEBUG": "6"}
    # impi_rt 2021.19 needs a libfabric that is not on the registry; 2021.18.1 brings its own.
    image = ImageRecipe(wheel="impi_rt==2021.18.1", abi_note="Intel MPI shares MPICH's libmpi.so.12")
    # What the expected value and the Kubernetes MPI operator ask of it.
    progress_threads = "Intel MPI's threads"
    stand_in_rank = 1
    mpi_operator_implementation = "Intel"

    def fabric_env(self, spec: LaunchSpec) -> dict[str, str]:
        """Shared memory within a node; between nodes libfabric's mlx provider (InfiniBand through UCX) or tcp.

        The old RDMA SKUs without SR-IOV (NC24r, ND24rs, NC24rs_v2) reach their InfiniBand only through Network Direct
        with Intel MPI's DAPL fabric (Intel MPI 2018 and earlier; 2019+ dropped DAPL): rendered as such, to run with an
        image that carries that runtime."""
        if spec.ib and not spec.sriov:
            return {"I_MPI_FABRICS": "shm:dapl", "I_MPI_DAPL_PROVIDER": "ofa-v2-ib0", "I_MPI_DYNAMIC_CONNECTION": "0"}
        env = {"I_MPI_FABRICS": "shm:ofi", "FI_PROVIDER": "mlx" if spec.ib else "tcp"}
        if spec.iface and not spec.ib:
            env["FI_TCP_IFACE"] = iface_name(spec, "FI_TCP_IFACE")
        return env

    # Intel MPI pins ranks to cores by default; each worker sets its own thread count, so no pinning.
    rank_defaults = {"I_MPI_PIN": "0"}

    def ssh_options(self, ssh_args: list[str]) -> tuple[list[str], dict[str, str]]:
        # Intel's Hydra takes ssh's options as one string in -bootstrap-exec-args (not in its -help, but in the
        # binary; checked with 2021.18.1 and a recording stand-in for ssh: they arrive as separate words before
        # the host). MPICH's HYDRA_LAUNCHER_EXTRA_ARGS is not read by Intel's Hydra.
        return ["-bootstrap-exec-args", " ".join(ssh_args)], {}

    def parse(self, lines: list[str], nodes: int | None) -> Transport:
        provider = fabrics = shm_default = None
        hosts: set[str] = set()
        for line in lines:
            m = _STARTUP.search(line)
            if not m:
                continue
            text = m.group(1)
            if p := _PROVIDER.search(text):
                provider = (p.group(1), line)
            elif f := _FABRICS.search(text):
                fabrics = (f.group(1).lower(), line)
            elif "Defaulting to shm fabric" in text:
                shm_default = line
            elif r := _PIN_ROW.search(text):
                hosts.add(short_host(r.group(1)))
        # The pinning table lists every rank with its node, so (unlike per-peer lines) it also proves a single node.
        multi = nodes > 1 if nodes is not None else (len(hosts) > 1 if hosts else None)
        if multi:
            return slowest([Seen(ofi_kind(provider[0]), "inter", provider[1], self.name)]) if provider else UNKNOWN
        if shm_default:
            return Transport(Effective.SHM.value, shm_default, self.name)
        if provider is None:
            return UNKNOWN
        # One node with libfabric loaded: ranks on one node talk over shm unless I_MPI_FABRICS is "ofi" alone (the
        # default and "shm:ofi" keep shm inside a node). Intel MPI echoes I_MPI_FABRICS only when the user set it.
        if fabrics and fabrics[0] == "ofi":
            return slowest([Seen(ofi_kind(provider[0]), "any", provider[1], self.name)])
        if multi is False:
            return Transport(Effective.SHM.value, fabrics[1] if fabrics else provider[1], self.name)
        return UNKNOWN  # node count unknown: the provider is only the inter-node fabric, cannot tell if it is used


FLAVOUR = IntelMPI()
