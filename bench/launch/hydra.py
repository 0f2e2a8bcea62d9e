"""The Hydra process manager, shared by MPICH's and Intel MPI's mpiexec: the same core options, the MPICH ABI, and
a render that differs only in how each flavour hands ssh its options and which defaults it adds to the ranks' env."""
from __future__ import annotations

from bench.launch.fabric import iface_name
from bench.launch.flavour import Flavour
from bench.launch.spec import LaunchSpec, Rendered


def hydra_argv(spec: LaunchSpec, mpiexec: str, env: dict[str, str], launcher: list[str] = ()) -> list[str]:
    """`launcher`: the flavour's options for reaching other hosts (ssh and its arguments)."""
    argv = [mpiexec]
    if iface := iface_name(spec, "Hydra's -iface"):
        argv += ["-iface", iface]  # Hydra's own connections (and its proxies') on the chosen interface
    argv += [*launcher, "-n", str(spec.workers), "-ppn", str(spec.workers_per_node),
             "-hosts", ",".join(h for h, _ in spec.hosts)]
    for name in sorted(env):
        argv += ["-genv", name, env[name]]  # name and value as two argv elements: no shell ever parses them
    return argv


class HydraFlavour(Flavour):
    """A flavour whose launcher is a Hydra mpiexec, on the MPICH ABI."""
    tool = "mpiexec.hydra"
    abi = "mpich"
    libmpi_in_venv = True  # the MPICH wheel's libmpi.so.12 (Intel MPI's image has it too, beside its own prefix)
    rank_defaults: dict[str, str] = {}  # set for every rank unless the fabric or the spec sets it

    def ssh_options(self, ssh_args: list[str]) -> tuple[list[str], dict[str, str]]:
        """How this Hydra hands ssh its options (`ssh_args`, never empty): (mpiexec arguments, mpiexec's own env)."""
        raise NotImplementedError(f"flavour {self.name}: no way to pass ssh options")

    def render(self, spec: LaunchSpec, tool: str | None = None) -> Rendered:
        env = {**self.fabric_env(spec), **spec.env}
        for name, value in self.rank_defaults.items():
            env.setdefault(name, value)
        launcher, launcher_env = [], {}
        if spec.ssh:
            launcher = ["-launcher", "ssh"]
            if spec.ssh.args():
                more, launcher_env = self.ssh_options(spec.ssh.args())
                launcher += more
        argv = hydra_argv(spec, tool or self.tool, env, launcher)
        return Rendered(tuple(argv) + spec.program, {**env, **launcher_env})
