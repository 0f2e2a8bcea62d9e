"""Hosts backend: cells run across machines reachable over ssh, without a scheduler (a few VMs, a scale set).

Each cell takes the first N configured hosts that have the slots it needs (N = its nodes). Its own launcher
(mpirun, mpiexec, horovodrun) is rendered by its flavour with those hosts, the interface and the ssh settings, and is
started on this machine when this machine is one of the cell's hosts, otherwise over ssh on the cell's first host.
Workers write their records into the shared workdir (same path on every host), where bench reads them back.

Before a cell runs, each of its hosts is checked once per run: it answers over ssh within the timeout, runs the same
Python, bench, workload code and Horovod as this machine, sees the shared workdir, has the interface, and has the
cores (cpu cells) or GPUs the cell puts on it. A host that fails fails the cells that need it, with its name; the
cells that do not use it go on. Every process of a cell carries the cell's token in its environment; when a cell
ends (or times out, or bench dies) the token is swept on every host of the cell, so no worker outlives it.
"""
from __future__ import annotations

import math
import os
import shlex
import shutil
import socket
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import psutil

from bench.backend_settings.hosts import Host, HostsConfig, configured_hosts
from bench.backends.base import Backend
from bench.backends.hosts.leash import Leashes, sweep, sweep_argv, sweep_command
from bench.backends.hosts.nodes import MARKER, PROBE_UNDER_MODELS, node_verdict, probe
from bench.backends.shared import launcher_job
from bench.backends.shared.cell_launch import CellLaunch, Placement, cell_dir, launch_for, runtime_of
from bench.backends.shared.container import apptainer_prefix, write_wrapper
from bench.backends.shared.data_reach import imagenet_reach_reason, make_imagenet_sample_if_needed
from bench.backends.shared.guard import LEASH_GRACE_S
from bench.backends.shared.outcome import JobEnd, Outcome, classify
from bench.backends.shared.process import kill_family
from bench.core.errors import BenchInputError
from bench.launch import LAUNCHERS, Rendered, Ssh
from bench.launch.bindings import binding_reason
from bench.launch.fabric import is_cidr
from bench.planning.cell import PlannedCell
from models.registry.engines import TORCH_DISTRIBUTED_ENGINES


@dataclass
class Handle:
    planned: PlannedCell
    rendered: Rendered
    token: str
    hosts: tuple[str, ...]
    job: launcher_job.Handle | None = None  # the launcher (or the ssh that runs it on the first host)
    error: str | None = None  # why the cell failed before anything started (a node check)
    leashes: Leashes | None = None  # one per other host of the cell
    lost: tuple[str, str] | None = None  # (host, what its leash's ssh said) when a host stopped answering

    @property
    def stopped(self) -> str | None:
        return self.job.stopped if self.job else None


class HostsBackend(Backend):
    name = "hosts"

    def __init__(self, config: HostsConfig, results_dir: Path, timeout_s: float, python: str = sys.executable,
                 imagenet_dir: str | None = None, imagenet_sample=None):
        self.config = config
        self.hosts: tuple[Host, ...] = configured_hosts(config)
        self.workdir = Path(config.workdir or results_dir).resolve()
        self.timeout_s = timeout_s
        self.python = python
        self.imagenet_dir = Path(imagenet_dir).resolve() if imagenet_dir else None
        self.imagenet_sample = imagenet_sample
        self._marker: str | None = None
        self._probes: dict[tuple[str, str], dict[str, Any] | str] = {}  # (host, python) -> facts, or why not

    @classmethod
    def from_settings(cls, settings, results_dir: Path, timeout_s: float | None = None) -> HostsBackend:
        return cls(settings.hosts, results_dir, timeout_s or settings.timeout_s, imagenet_dir=settings.imagenet_dir,
                   imagenet_sample=settings.imagenet_sample)

    # --- where a cell runs --------------------------------------------------------------------------------------
    def hosts_for(self, cell: dict[str, Any], nodes: int) -> tuple[str, ...] | None:
        """The first `nodes` hosts with room for the cell's workers per node; None if there are not enough."""
        per_node = math.ceil(cell["gpus"] / nodes)
        fitting = [h.name for h in self.hosts if h.slots is None or h.slots >= per_node]
        return tuple(fitting[:nodes]) if len(fitting) >= nodes else None

    def reach_reason(self, cell: dict[str, Any], nodes: int) -> str | None:
        if reason := imagenet_reach_reason(cell, self.imagenet_dir, self.imagenet_sample):
            return reason
        if self.hosts_for(cell, nodes) is None:
            per_node = math.ceil(cell["gpus"] / nodes)
            roomy = sum(1 for h in self.hosts if h.slots is None or h.slots >= per_node)
            return (f"needs {nodes} nodes with {per_node} slots each; backend.hosts has {roomy}"
                    if roomy < len(self.hosts) else f"needs {nodes} nodes; backend.hosts has {len(self.hosts)}")
        flavour = LAUNCHERS[cell["mpi"]]
        if cell["engine"] in TORCH_DISTRIBUTED_ENGINES and flavour.native == "torchrun" and nodes > 1:
            return (f"engine={cell['engine']} with mpi={cell['mpi']} on {nodes} nodes: one torchrun per host is not "
                    f"started by the hosts backend yet (mpi: openmpi starts DDP across hosts)")
        # what the installed build serves, where the workers run this machine's environments (not a container's)
        if self.config.container is None and (reason := binding_reason(cell, self.python)):
            return reason
        try:  # what only the launch line can tell: an interface a layer cannot take (a CIDR for a name-only layer)
            self.launch(PlannedCell(cell, "plan", "planned", nodes=nodes), "plan", 0, "token").render()
        except ValueError as e:
            return str(e)
        return None

    def cell_dir(self, planned: PlannedCell, run_id: str, job: int = 0) -> Path:
        return cell_dir(self.workdir, planned, run_id, job)

    def launch(self, planned: PlannedCell, run_id: str, job: int = 0, token: str | None = None) -> CellLaunch:
        """The cell's hosts, the interface and the ssh settings between them; CPU workers share the smallest
        probed node's cores (this machine's before any probe)."""
        cores = [p["cores"] for p in self._probes.values() if isinstance(p, dict)] or [os.cpu_count() or 1]
        ssh = self._launcher_ssh(planned.cell["mpi"]) if planned.nodes > 1 else None
        where = Placement(self.workdir, self.python, self.hosts_for(planned.cell, planned.nodes) or (),
                          self.config.iface, ssh, cores=min(cores),
                          data_dir=self.imagenet_dir, token=token, **self._container_placement(planned, run_id, job))
        return launch_for(planned, run_id, job, where=where)

    # --- containers (backend.hosts.container) -------------------------------------------------------------------
    def _mounts(self) -> list[str]:
        """What the workers in a container must see at the same path: the shared workdir, the data set."""
        return [str(self.workdir), *([str(self.imagenet_dir)] if self.imagenet_dir else [])]

    def _container_prefix(self, wrapper: Path) -> tuple[str, ...]:
        c = self.config.container
        return apptainer_prefix(c, self._mounts()) if c.engine == "apptainer" else (str(wrapper),)

    def _container_placement(self, planned: PlannedCell, run_id: str, job: int) -> dict[str, Any]:
        c = self.config.container
        if c is None:
            return {}
        wrapper = cell_dir(self.workdir, planned, run_id, job) / "container.sh"
        return {"program_prefix": self._container_prefix(wrapper), "worker_python": c.python, "models_dir": c.models}

    def _write_wrapper(self, path: Path, names: list[str] = ()) -> None:
        if self.config.container is not None and self.config.container.engine != "apptainer":
            write_wrapper(path, self.config.container, self._mounts(), names)

    def render(self, planned: PlannedCell, run_id: str, job: int = 0) -> Rendered:
        return self.launch(planned, run_id, job).render()

    def describe(self, planned: PlannedCell, run_id: str) -> dict[str, Any]:
        r = self.render(planned, run_id)
        hosts = self.hosts_for(planned.cell, planned.nodes) or ()
        where = "this machine" if self._runs_here(hosts) else f"{hosts[0]} over ssh"
        return {"argv": list(r.argv), "env": r.env, "hosts": list(hosts), "launcher_on": where}

    # --- ssh ----------------------------------------------------------------------------------------------------
    def _ssh(self) -> Ssh:
        s = self.config.ssh
        return Ssh(config_file=s.config, port=s.port, identity_file=s.identity, user=s.user)

    def _launcher_ssh(self, mpi: str) -> Ssh:
        """The ssh settings the flavour renders itself; what its launcher cannot take (horovodrun: no config file, no
        user) reaches its ssh through the wrapper put first on its PATH instead (`_ssh_wrapper`)."""
        full = self._ssh()
        if LAUNCHERS[mpi].ssh_problem(full) is None:
            return full
        return Ssh(port=full.port, identity_file=full.identity_file)

    def ssh_argv(self, host: str) -> list[str]:
        s = self.config.ssh
        argv = [shutil.which("ssh") or "ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={s.connect_timeout_s}"]
        argv += self._ssh().args()
        return [*argv, host]

    def _ssh_wrapper(self, mpi: str, where: Path) -> tuple[str, ...]:
        """A directory holding an `ssh` that adds the settings the flavour's launcher could not take; () if none."""
        full, given = self._ssh(), self._launcher_ssh(mpi)
        extra = [a for a in full.args() if a not in given.args()]
        if not extra:
            return ()
        real = shutil.which("ssh") or "/usr/bin/ssh"
        bin_dir = where / "bin"
        bin_dir.mkdir(parents=True, exist_ok=True)
        (bin_dir / "ssh").write_text(f"#!/bin/sh\nexec {shlex.quote(real)} {shlex.join(extra)} \"$@\"\n")
        (bin_dir / "ssh").chmod(0o755)
        return (str(bin_dir),)

    def _is_here(self, host: str) -> bool:
        names = {"localhost", "127.0.0.1", "::1", socket.gethostname(), socket.gethostname().split(".")[0]}
        if host in names:
            return True
        try:
            addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
        except OSError:
            return False
        mine = {a.address for nics in psutil.net_if_addrs().values() for a in nics}
        return bool(addresses & mine)

    def _runs_here(self, hosts: tuple[str, ...]) -> bool:
        return any(self._is_here(h) for h in hosts)

    # --- node checks --------------------------------------------------------------------------------------------
    def check(self, planned: list[PlannedCell]) -> None:
        """Before anything is written: ssh is installed, and the files the ssh settings name exist."""
        if not any(p.runnable for p in planned):
            return
        if shutil.which("ssh") is None:
            raise BenchInputError("hosts backend: ssh not found on PATH (install openssh-client)")
        for key, value in (("config", self.config.ssh.config), ("identity", self.config.ssh.identity)):
            if value and not Path(value).expanduser().is_file():
                raise BenchInputError(f"backend.hosts.ssh.{key}: no file {value}")

    def prepare(self, planned: list[PlannedCell], say=print) -> None:
        """The shared workdir and its marker (what every host must see), and the ImageNet sample if asked for."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._marker = uuid.uuid4().hex
        (self.workdir / MARKER).write_text(self._marker)
        self._write_wrapper(self.workdir / ".bench-container.sh")  # the node checks' (facts from the image)
        runnable = [p for p in planned if p.runnable]
        used = {h for p in runnable for h in self.hosts_for(p.cell, p.nodes) or ()}
        if runnable:
            say(f"hosts backend: {len(used)} host(s) in use "
                f"({', '.join(h.name for h in self.hosts if h.name in used)}), workdir {self.workdir}")
        make_imagenet_sample_if_needed(runnable, self.imagenet_dir, self.imagenet_sample, say)

    def _probe(self, host: str | None, python: str) -> dict[str, Any] | str:
        """The node's facts (models/probes/node_probe.py), or why they could not be had. host None = this machine."""
        iface = self.config.iface if self.config.iface and not is_cidr(self.config.iface) else ""
        remote = host is not None and not self._is_here(host)
        program = None
        if (c := self.config.container) is not None:  # the workers' facts are the image's
            wrapper = self.workdir / ".bench-container.sh"
            program = (*self._container_prefix(wrapper), c.python, f"{c.models}/{PROBE_UNDER_MODELS}")
        return probe(python, self.workdir / MARKER, iface, self.ssh_argv(host) if remote else None, program)

    def _facts(self, hosts: tuple[str, ...], python: str) -> dict[str | None, dict[str, Any] | str]:
        """Facts of this machine (key None) and of each host, each asked once per run, in parallel."""
        wanted = [h for h in (None, *hosts) if (h or "", python) not in self._probes]
        if wanted:
            with ThreadPoolExecutor(max_workers=min(16, len(wanted))) as pool:
                for host, facts in zip(wanted, pool.map(lambda h: self._probe(h, python), wanted)):
                    self._probes[(host or "", python)] = facts
        return {h: self._probes[(h or "", python)] for h in (None, *hosts)}

    def node_problem(self, planned: PlannedCell, hosts: tuple[str, ...]) -> str | None:
        """The first of the cell's hosts that cannot run its share, and why (one line naming it); None if all can."""
        python = runtime_of(planned, self.python).python
        facts = self._facts(hosts, python)
        here = facts[None]
        if isinstance(here, str):
            return f"this machine's own check failed: {here}"
        for host in hosts:
            problem = node_verdict(host, facts[host], here, planned, self.config.iface, self.workdir)
            if problem:
                return problem
        return None

    # --- running ------------------------------------------------------------------------------------------------
    def submit(self, planned: PlannedCell, run_id: str, job: int = 0) -> Handle:
        token = uuid.uuid4().hex
        hosts = self.hosts_for(planned.cell, planned.nodes) or ()
        launch = self.launch(planned, run_id, job, token)
        rendered = launch.render()
        handle = Handle(planned, rendered, token, hosts)
        if self._marker is None:
            self.prepare([planned], say=lambda _text: None)
        problem = self.node_problem(planned, hosts)
        if problem:
            handle.error = f"node check failed: {problem}"
            return handle
        cell_dir = launch.dir
        cell_dir.mkdir(parents=True, exist_ok=True)
        self._write_wrapper(cell_dir / "container.sh", list(launch.spec.env))
        path_dirs = (*self._ssh_wrapper(planned.cell["mpi"], cell_dir), *launch.runtime.bin_dirs)
        reap_then = sweep_command([self._sweep_argv(h, token) for h in self._remote_hosts(hosts)])
        if self._runs_here(hosts):
            handle.job = launcher_job.start(planned, rendered, cell_dir, self.timeout_s, path_dirs, token, reap_then)
        else:
            # The launcher runs on the cell's first host; the ssh session that started it is what this machine
            # watches (its exit status is the launcher's).
            remote = (f"cd {shlex.quote(str(self.workdir))} && export PATH={':'.join(map(shlex.quote, path_dirs))}"
                      f":\"$PATH\" && exec env {' '.join(shlex.quote(f'{k}={v}') for k, v in rendered.env.items())} "
                      f"{shlex.join(rendered.argv)}")
            over_ssh = Rendered((*self.ssh_argv(hosts[0]), remote), {})
            handle.job = launcher_job.start(planned, over_ssh, cell_dir, self.timeout_s, (), token, reap_then)
        handle.leashes = Leashes(token)
        handle.leashes.start(self._remote_hosts(hosts), self.ssh_argv, self.python, cell_dir)
        return handle

    def _remote_hosts(self, hosts: tuple[str, ...]) -> list[str]:
        return [h for h in hosts if not self._is_here(h)]

    def _sweep_argv(self, host: str, token: str) -> list[str]:
        return sweep_argv(self.ssh_argv(host), self.python, token)

    def _kill(self, job: launcher_job.Handle, hosts: tuple[str, ...] = (), lost: str | None = None) -> None:
        """The launcher and everything carrying the token here, then the token on every other host of the cell
        (not on a host that stopped answering: its leash sweeps it)."""
        launcher_job.kill(job)
        sweep([self._sweep_argv(h, job.token) for h in self._remote_hosts(hosts) if h != lost])

    def poll(self, handle: Handle) -> bool:
        if handle.job is None:
            return True
        if handle.job.proc.poll() is None and (lost := handle.leashes.lost()):
            handle.lost = lost
            handle.job.stopped = "lost"
            self._kill(handle.job, handle.hosts, lost[0])
            return True
        return launcher_job.poll(handle.job, lambda j: self._kill(j, handle.hosts))

    def cancel(self, handle: Handle) -> None:
        if handle.job is not None:
            handle.job.stopped = handle.job.stopped or "interrupted"
            self._kill(handle.job, handle.hosts)

    def collect(self, handle: Handle) -> Outcome:
        if handle.job is None:
            return classify(JobEnd(error=handle.error), handle.planned.cell["repeats"], self.timeout_s, "")
        job = handle.job
        lost = handle.lost[0] if handle.lost else None
        end = launcher_job.finish(job, lambda j: self._kill(j, handle.hosts, lost))
        if job.stopped is None and end.rc != 0:
            handle.lost = handle.leashes.lost()  # a host gone at the same moment the launcher failed
        handle.leashes.release()
        if handle.lost:
            host, said = handle.lost
            end = replace(end, lost=f"{host} stopped answering during the cell (its leash's ssh: {said}); the cell's "
                                    f"processes were killed here and, within {LEASH_GRACE_S:g} s of the last "
                                    f"heartbeat, by its leash on {host}")
        outcome = classify(end, handle.planned.cell["repeats"], self.timeout_s,
                           f"the cell's processes on {', '.join(handle.hosts)} were killed", handle.hosts,
                           handle.planned.per_node)
        outcome.log_path = job.cell_dir / "log.txt"
        return outcome

    def sweep(self, token: str) -> int:
        """A dead run's leftovers on this machine (its watchdog sweeps the other hosts)."""
        return kill_family(None, token)
