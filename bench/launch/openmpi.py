"""Open MPI: mpirun, its fabric flags, its per-peer BTL log lines, the main environment (Open MPI ABI)."""
from __future__ import annotations

import re

from bench.launch.fabric import is_cidr, native_env, ucx_env
from bench.launch.flavour import Flavour, ImageRecipe
from bench.launch.spec import LaunchSpec, Rendered
from bench.records.transport import Seen, Transport, decide, multi_node, short_host, ucx_paths

# mca: bml prints one line per peer and rank: "[vm:24804] mca: bml: Using tcp btl for send to [[3102,1],1] on node vm"
_BML = re.compile(r"^\[([^:\]]+):\d+\] mca: bml: Using (\w+) btl for send to \S+ on node (\S+)")
_BTL_KIND = {"vader": "shm", "sm": "shm", "smcuda": "shm", "tcp": "tcp", "openib": "ib"}


class OpenMPI(Flavour):
    name = "openmpi"
    title = "Open MPI"
    progress_threads = "Open MPI's threads"
    stand_in_rank = 0  # Horovod's usual build
    mpi_operator_implementation = "OpenMPI"
    tool = "mpirun"
    abi = "openmpi"
    native = "launcher"  # DDP started by mpirun, rendezvous through MASTER_ADDR/PORT
    # btl_base_verbose=1 prints only "mca: bml: Using <btl> btl for send to <peer> on node <host>" (one line per peer
    # and rank: N^2 lines, once). pml_ucx_verbose=1 names the UCX pml when it is chosen (4 lines per rank).
    # pml_base_verbose=10 would also name the chosen pml, but with ~30 component lines per rank: left out.
    debug = {"OMPI_MCA_btl_base_verbose": "1", "OMPI_MCA_pml_ucx_verbose": "1"}
    layers = ("ucx",)
    image = ImageRecipe(apt=("openmpi-bin", "libopenmpi-dev", "libucx0"))

    def fabric_args(self, spec: LaunchSpec) -> list[str]:
        """InfiniBand through UCX's pml; without it, ob1 with shared memory in a node and TCP between nodes. The
        interface (a name or a CIDR: Open MPI takes both) bounds the MPI traffic and the runtime's own TCP (oob)."""
        if spec.ib:
            args = ["--mca", "pml", "ucx", "--mca", "osc", "ucx"]
        else:
            args = ["--mca", "pml", "ob1", "--mca", "btl", "self,vader,tcp"]
            if spec.iface:
                args += ["--mca", "btl_tcp_if_include", spec.iface]
        if spec.iface:
            args += ["--mca", "oob_tcp_if_include", spec.iface]
        return args

    def ssh_args(self, spec: LaunchSpec) -> list[str]:
        # plm_rsh_args is one string that Open MPI splits on whitespace and hands to ssh before the host (Ssh values
        # hold none); checked with Open MPI 4.1.4 and a recording stand-in for ssh.
        return ["--mca", "plm_rsh_args", " ".join(spec.ssh.args())] if spec.ssh and spec.ssh.args() else []

    def fabric_env(self, spec: LaunchSpec) -> dict[str, str]:
        env = ucx_env(spec) if spec.ib else {}
        # DDP under mpirun (the native engine) needs the interface by name; a CIDR only Open MPI itself can take.
        if not (spec.iface and is_cidr(spec.iface)):
            env.update(native_env(spec))
        return env

    def render(self, spec: LaunchSpec, tool: str | None = None) -> Rendered:
        argv = [tool or self.tool, "-np", str(spec.workers), "-H", ",".join(f"{h}:{n}" for h, n in spec.hosts),
                # Each worker sets its own thread count; Open MPI's default core binding would pile threads on one core.
                "--bind-to", "none", "--map-by", "slot"]
        if spec.as_root:
            argv.append("--allow-run-as-root")
        argv += self.fabric_args(spec) + self.ssh_args(spec)
        env = {**self.fabric_env(spec), **spec.env}
        for name in sorted(env):
            argv += ["-x", name]  # -x forwards the variable (from mpirun's own environment) to every rank, remote too
        return Rendered(tuple(argv) + spec.program, env)

    def launcher_env(self, spec: LaunchSpec) -> dict[str, str]:
        """No core binding (each worker sets its threads), slot mapping, and the --mca flags as OMPI_MCA_* variables."""
        env = {**self.fabric_env(spec), "OMPI_MCA_hwloc_base_binding_policy": "none",
               "OMPI_MCA_rmaps_base_mapping_policy": "slot"}
        args = self.fabric_args(spec)
        env.update({f"OMPI_MCA_{args[i + 1]}": args[i + 2] for i, a in enumerate(args) if a == "--mca"})
        return env

    def parse(self, lines: list[str], nodes: int | None) -> Transport:
        seen, hosts = [], set()
        for line in lines:
            m = _BML.search(line)
            if not m or m.group(2) == "self":
                continue
            me, peer = short_host(m.group(1)), short_host(m.group(3))
            hosts.update((me, peer))
            seen.append(Seen(_BTL_KIND.get(m.group(2), "other"), "intra" if me == peer else "inter", line, self.name))
        seen += ucx_paths(lines)
        if any(s.scope == "inter" for s in seen):
            hosts.add("another")  # UCX >= 1.14 names inter-node configurations
        return decide(seen, multi_node(nodes, hosts))


FLAVOUR = OpenMPI()
