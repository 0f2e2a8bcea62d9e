"""Gloo: Horovod's own launcher (horovodrun) with the Gloo controller, no MPI at all; the native engine's cells under
it are started by torchrun (bench.launch.torchrun)."""
from __future__ import annotations

import re

from bench.launch.fabric import iface_name
from bench.launch.flavour import Flavour, ImageRecipe
from bench.launch.spec import LaunchSpec, Rendered, Ssh
from bench.records.transport import UNKNOWN, Effective, Transport

_DEV = re.compile(r"rendezvous started for rank=.*\bdev=\{(\w+),")


class Gloo(Flavour):
    name = "gloo"
    title = "Gloo"
    progress_threads = "Horovod's Gloo threads"
    stand_in_rank = 3  # no MPI launcher: the least like an MPI cell's worker
    # Its cells run on the Open MPI image (image.runs_on), whose launcher pod the operator sets up the same way.
    mpi_operator_implementation = "OpenMPI"
    srun_starts_ranks = False  # horovodrun starts the ranks and their Gloo rendezvous itself
    tool = "horovodrun"
    abi = "openmpi"  # the main environment's Horovod has the Gloo controller built in next to the MPI one
    controller = "gloo"
    native = "torchrun"
    # Azure ML has no horovodrun distribution: horovodrun runs inside a one-process job, and it starts remote workers
    # over ssh, which Azure ML jobs do not offer.
    azureml_launch = "own"
    # Horovod's debug level prints the Gloo device ("dev={tcp, ..., iface=lo, ...}"): ~28 lines per rank, at init
    # only (the same 57 lines for 2 ranks after 1 or 300 allreduces).
    debug = {"HOROVOD_LOG_LEVEL": "debug"}
    image = ImageRecipe(runs_on="openmpi")  # build_horovod.sh builds the Gloo and MPI controllers together

    def ssh_problem(self, ssh: Ssh | None) -> str | None:
        if ssh and (ssh.config_file or ssh.user):
            # horovodrun writes its own ssh line: `ssh -o PasswordAuthentication=no -o StrictHostKeyChecking=no HOST
            # -p PORT -i FILE ...` (Horovod 0.28.1, seen through a recording stand-in for ssh); ~/.ssh/config applies.
            return "horovodrun takes no ssh config file or user (only --ssh-port and --ssh-identity-file)"
        return None

    def fabric_env(self, spec: LaunchSpec) -> dict[str, str]:
        """Gloo has no InfiniBand transport (Horovod builds its TCP device on Linux); across hosts, the interface."""
        if spec.hosts and not spec.one_local_host and spec.iface:
            return {"HOROVOD_GLOO_IFACE": iface_name(spec, "HOROVOD_GLOO_IFACE")}
        return {}

    def render(self, spec: LaunchSpec, tool: str | None = None) -> Rendered:
        if problem := self.ssh_problem(spec.ssh):
            raise ValueError(problem)
        argv = [tool or self.tool, "--gloo", "-np", str(spec.workers),
                "-H", ",".join(f"{h}:{n}" for h, n in spec.hosts)]
        if spec.one_local_host:
            argv += ["--network-interface", "lo"]  # one machine: keep rendezvous and ring on loopback
        elif spec.iface:
            argv += ["--network-interface", iface_name(spec, "horovodrun --network-interface")]
        if spec.ssh and spec.ssh.port is not None:
            argv += ["--ssh-port", str(spec.ssh.port)]
        if spec.ssh and spec.ssh.identity_file:
            argv += ["--ssh-identity-file", spec.ssh.identity_file]
        # horovodrun forwards its own environment to the workers.
        return Rendered(tuple(argv) + spec.program, {**self.fabric_env(spec), **spec.env})

    def parse(self, lines: list[str], nodes: int | None) -> Transport:
        # Horovod 0.28.1's Gloo controller always builds a gloo::transport::tcp device on Linux
        # (horovod/common/gloo/gloo_context.cc: `#ifdef __linux__ ... gloo::transport::tcp::CreateDevice`; libuv only
        # on macOS), for every rendezvous, even when all ranks share one machine: Gloo's own traffic is always TCP.
        for line in lines:
            if m := _DEV.search(line):
                return Transport("tcp" if m.group(1) in ("tcp", "uv") else Effective.UNKNOWN.value, line, self.name)
        # Without Horovod's debug lines: the controller line still proves Gloo ran, and Gloo in Horovod is TCP on Linux.
        for line in lines:
            if "Using GLOO to perform controller operations" in line or "Gloo controller initialized" in line:
                return Transport(Effective.TCP.value, line, self.name)
        return UNKNOWN


FLAVOUR = Gloo()
