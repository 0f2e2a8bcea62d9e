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

import json
import math
import os
import shlex
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import psutil

from bench.backends import jobs
from bench.backends.base import Outcome
from bench.backends.hosts_config import Host, HostsConfig, configured_hosts
from bench.backends.jobs import LEASH_BEAT_S, LEASH_GRACE_S, MODELS_DIR, TOKEN_VAR, failed_node, free_port, \
    imagenet_reach_reason, last_error, make_imagenet_sample_if_needed, tool_path, worker_program
from bench.cell import PlannedCell
from bench.errors import BenchInputError
from bench.launch import LAUNCHERS, TORCHRUN, LaunchSpec, Rendered, Ssh
from bench.launch.cellenv import cell_env
from bench.launch.fabric import is_cidr
from bench.launch.runtimes import runtime_for

REPO_ROOT = MODELS_DIR.parent
PROBE_TIMEOUT_S = 30  # one node's check, ssh connection included
SWEEP_TIMEOUT_S = 30
# A leash's ssh gives up on a host that stops answering (a link down, a dead machine) after 3 unanswered probes 2 s
# apart: the cell fails, naming the host, seconds after the link goes rather than at the cell's timeout.
LEASH_SSH = ("-o", "ServerAliveInterval=2", "-o", "ServerAliveCountMax=3")
MARKER = ".bench-shared"  # written into the workdir by this machine; every host must read the same token back

# What a node is, as the node itself sees it. argv: repository root, marker path, interface name or "".
PROBE = r"""
import hashlib, json, os, pathlib, shutil, socket, subprocess, sys
from importlib import metadata
root, marker, iface = sys.argv[1:4]
sys.path.insert(0, root)
import bench, models
code = hashlib.sha256()
for p in sorted(pathlib.Path(models.__file__).resolve().parent.rglob("*.py")):
    code.update(p.name.encode()); code.update(p.read_bytes())
try:
    horovod = metadata.version("horovod")
except metadata.PackageNotFoundError:
    horovod = None
gpus = 0
if shutil.which("nvidia-smi"):
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout
        gpus = sum(1 for line in out.splitlines() if line.startswith("GPU "))
    except (OSError, subprocess.TimeoutExpired):
        pass
try:
    seen = pathlib.Path(marker).read_text()
except OSError:
    seen = None
print(json.dumps({"host": socket.gethostname(), "python": sys.version.split()[0], "bench": bench.__version__,
                  "models": code.hexdigest()[:16], "horovod": horovod, "cores": len(os.sched_getaffinity(0)),
                  "gpus": gpus, "marker": seen,
                  "iface": (not iface) or os.path.exists(os.path.join("/sys/class/net", iface))}))
"""
SAME = (("python", "Python"), ("bench", "bench"), ("models", "workload code"), ("horovod", "Horovod"))


@dataclass
class Handle:
    planned: PlannedCell
    rendered: Rendered
    token: str
    hosts: tuple[str, ...]
    job: jobs.Handle | None = None  # the launcher (or the ssh that runs it on the first host)
    error: str | None = None  # why the cell failed before anything started (a node check)
    leashes: dict[str, subprocess.Popen] = field(default_factory=dict)  # host -> ssh running its leash
    beating: threading.Event = field(default_factory=threading.Event)  # cleared when the heartbeat must stop
    lost: tuple[str, str] | None = None  # (host, what its leash's ssh said) when a host stopped answering

    @property
    def stopped(self) -> str | None:
        return self.job.stopped if self.job else None


class HostsBackend:
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
        if cell["engine"] == "native" and flavour.native == "torchrun" and nodes > 1:
            return (f"engine=native with mpi={cell['mpi']} on {nodes} nodes: one torchrun per host is not started "
                    f"by the hosts backend yet (mpi: openmpi starts DDP across hosts)")
        try:  # what only the launch line can tell: an interface a layer cannot take (a CIDR for a name-only layer)
            self._render(PlannedCell(cell, "plan", "planned", nodes=nodes), "plan", 0, "token")
        except ValueError as e:
            return str(e)
        return None

    def cell_dir(self, planned: PlannedCell, run_id: str, job: int = 0) -> Path:
        return self.workdir / "runs" / run_id / planned.cell_id / f"job{job}"

    def threads_for(self, planned: PlannedCell) -> int:
        if planned.cell["threads"]:
            return planned.cell["threads"]
        if planned.sku.is_cpu:
            cores = [p["cores"] for p in self._probes.values() if isinstance(p, dict)] or [os.cpu_count() or 1]
            return max(1, min(cores) // planned.per_node)
        return 4  # GPU workers: a few threads each for the host side

    def render(self, planned: PlannedCell, run_id: str, job: int = 0) -> Rendered:
        return self._render(planned, run_id, job, None)

    def _render(self, planned: PlannedCell, run_id: str, job: int, token: str | None) -> Rendered:
        c = planned.cell
        hosts = self.hosts_for(c, planned.nodes) or ()
        threads = self.threads_for(planned)
        rt = runtime_for(c["mpi"], self.python)
        out = self.cell_dir(planned, run_id, job) / "records.jsonl"
        env = cell_env(planned, threads, rt, iface=None if planned.nodes == 1 else self.config.iface)
        if token:
            env[TOKEN_VAR] = token  # every flavour forwards the cell's env to every worker, remote ones too
        one = planned.nodes == 1
        # One node: the launcher runs on that host and starts every worker there, as the local backend does.
        spec = LaunchSpec(workers=c["gpus"], hosts=(("localhost", c["gpus"]),) if one else
                          tuple((h, planned.per_node) for h in hosts),
                          program=worker_program(planned, run_id, out, threads, rt.python, self.imagenet_dir),
                          env=env, ib=c["ib"], as_root=os.geteuid() == 0, sriov=planned.sku.sriov,
                          iface=None if one else self.config.iface, ssh=None if one else self._launcher_ssh(c["mpi"]))
        flavour = LAUNCHERS[c["mpi"]]
        if c["engine"] == "native":
            if flavour.native == "torchrun":
                return TORCHRUN.render(spec, rt.python)
            # DDP's processes started by the launcher meet at the first host.
            spec = replace(spec, env={**spec.env, "MASTER_ADDR": "127.0.0.1" if one else hosts[0],
                                      "MASTER_PORT": str(free_port())})
        return flavour.render(spec, flavour.tool_path(rt) or tool_path(flavour.tool, rt.python))

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
        runnable = [p for p in planned if p.runnable]
        used = {h for p in runnable for h in self.hosts_for(p.cell, p.nodes) or ()}
        if runnable:
            say(f"hosts backend: {len(used)} host(s) in use ({', '.join(h.name for h in self.hosts if h.name in used)}),"
                f" workdir {self.workdir}")
        make_imagenet_sample_if_needed(runnable, self.imagenet_dir, self.imagenet_sample, say)

    def _probe(self, host: str | None, python: str) -> dict[str, Any] | str:
        """The node's facts (PROBE), or one line saying why they could not be had. host None = this machine."""
        iface = self.config.iface if self.config.iface and not is_cidr(self.config.iface) else ""
        argv = [python, "-c", PROBE, str(REPO_ROOT), str(self.workdir / MARKER), iface]
        remote = host is not None and not self._is_here(host)
        if remote:  # this machine's own share is checked here, without ssh
            argv = [*self.ssh_argv(host), shlex.join(argv)]
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                                 stdin=subprocess.DEVNULL, check=False)
        except subprocess.TimeoutExpired:
            return f"did not answer within {PROBE_TIMEOUT_S} s"
        except OSError as e:
            return f"could not run its check ({e.strerror or e})"
        if out.returncode == 255 and remote:
            return f"unreachable over ssh ({_last_line(out.stderr) or 'exit 255'})"
        try:
            return json.loads(out.stdout.strip().splitlines()[-1])
        except (json.JSONDecodeError, IndexError):
            return f"its check failed (exit {out.returncode}: {_last_line(out.stderr) or 'no output'})"

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
        python = runtime_for(planned.cell["mpi"], self.python).python
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
        rendered = self._render(planned, run_id, job, token)
        handle = Handle(planned, rendered, token, hosts)
        if self._marker is None:
            self.prepare([planned], say=lambda _text: None)
        problem = self.node_problem(planned, hosts)
        if problem:
            handle.error = f"node check failed: {problem}"
            return handle
        cell_dir = self.cell_dir(planned, run_id, job)
        cell_dir.mkdir(parents=True, exist_ok=True)
        rt = runtime_for(planned.cell["mpi"], self.python)
        path_dirs = (*self._ssh_wrapper(planned.cell["mpi"], cell_dir), *rt.bin_dirs)
        sweep = self._sweep_command(hosts, token)
        if self._runs_here(hosts):
            handle.job = jobs.start(planned, rendered, cell_dir, self.timeout_s, path_dirs, token, reap_then=sweep)
        else:
            # The launcher runs on the cell's first host; the ssh session that started it is what this machine
            # watches (its exit status is the launcher's).
            remote = (f"cd {shlex.quote(str(self.workdir))} && export PATH={':'.join(map(shlex.quote, path_dirs))}"
                      f":\"$PATH\" && exec env {' '.join(shlex.quote(f'{k}={v}') for k, v in rendered.env.items())} "
                      f"{shlex.join(rendered.argv)}")
            over_ssh = Rendered((*self.ssh_argv(hosts[0]), remote), {})
            handle.job = jobs.start(planned, over_ssh, cell_dir, self.timeout_s, (), token, reap_then=sweep)
        self._leash(handle, cell_dir)
        return handle

    # --- leashes: one per other host of a cell (jobs.leash runs there) -------------------------------------------
    def _leash(self, handle: Handle, cell_dir: Path) -> None:
        """Starts a leash over ssh on every other host of the cell, and the heartbeat down them. A leash's ssh that
        ends while the cell runs means its host stopped answering; a leash that stops hearing the beat ends the
        cell's processes on its host by itself (the link may be down: no sweep from here could reach them)."""
        for host in self._remote_hosts(handle.hosts):
            command = shlex.join(["env", f"PYTHONPATH={REPO_ROOT}", self.python, "-m", "bench.backends.jobs",
                                  "--leash", handle.token, f"{LEASH_GRACE_S:g}"])
            ssh = self.ssh_argv(host)
            argv = [*ssh[:-1], *LEASH_SSH, ssh[-1], command]
            with open(cell_dir / f"leash-{host}.txt", "wb") as out:
                try:
                    handle.leashes[host] = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=out,
                                                            stderr=subprocess.STDOUT, start_new_session=True)
                except OSError:
                    continue  # no ssh: the node check said so already
        if handle.leashes:
            handle.beating.set()
            threading.Thread(target=_beat, args=(handle,), daemon=True, name=f"leash-beat {handle.token}").start()

    def _lost_host(self, handle: Handle) -> tuple[str, str] | None:
        """A host whose leash's ssh ended while the cell ran: (host, ssh's last words)."""
        for host, leash in handle.leashes.items():
            if leash.poll() is not None:
                said = _last_line(jobs.read_end(handle.job.cell_dir / f"leash-{host}.txt", 4096))
                if not said or said.startswith("leash "):  # the leash's own line: ssh itself said nothing
                    said = (f"no answer to {LEASH_SSH[-1].split('=')[1]} keep-alives {LEASH_SSH[1].split('=')[1]} s "
                            f"apart" if leash.returncode == 255 else "")
                return host, f"exit {leash.returncode}" + (f", {said}" if said else "")
        return None

    def _unleash(self, handle: Handle) -> None:
        """Ends the heartbeat and closes each leash's input: a leash that still hears sweeps its host and exits."""
        handle.beating.clear()
        for leash in handle.leashes.values():
            try:
                leash.stdin.close()
            except OSError:
                pass
        for leash in handle.leashes.values():
            try:
                leash.wait(timeout=SWEEP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                leash.kill()
                leash.wait()

    def _remote_hosts(self, hosts: tuple[str, ...]) -> list[str]:
        return [h for h in hosts if not self._is_here(h)]

    def _sweep_command(self, hosts: tuple[str, ...], token: str) -> tuple[str, ...]:
        """One shell command that sweeps the token on every other host of the cell, in parallel (for the watchdog)."""
        remote = self._remote_hosts(hosts)
        if not remote:
            return ()
        parts = [shlex.join(self._sweep_argv(h, token)) + " &" for h in remote]
        return ("sh", "-c", " ".join(parts) + " wait")

    def _sweep_argv(self, host: str, token: str) -> list[str]:
        python = self.python
        command = shlex.join(["env", f"PYTHONPATH={REPO_ROOT}", python, "-m", "bench.backends.jobs", "--sweep", token])
        return [*self.ssh_argv(host), command]

    def _kill(self, handle: jobs.Handle, hosts: tuple[str, ...] = (), lost: str | None = None) -> None:
        """The launcher and everything carrying the token here, then the token on every other host of the cell
        (not on a host that stopped answering: its leash sweeps it)."""
        jobs.kill(handle)
        remote = [h for h in self._remote_hosts(hosts) if h != lost]
        if remote:
            with ThreadPoolExecutor(max_workers=min(16, len(remote))) as pool:
                list(pool.map(lambda h: subprocess.run(self._sweep_argv(h, handle.token), capture_output=True,
                                                       timeout=SWEEP_TIMEOUT_S, stdin=subprocess.DEVNULL,
                                                       check=False), remote))

    def poll(self, handle: Handle) -> bool:
        if handle.job is None:
            return True
        if handle.job.proc.poll() is None and (lost := self._lost_host(handle)):
            handle.lost = lost
            handle.job.stopped = "lost"
            self._kill(handle.job, handle.hosts, lost[0])
            return True
        return jobs.poll(handle.job, lambda j: self._kill(j, handle.hosts))

    def cancel(self, handle: Handle) -> None:
        if handle.job is not None:
            handle.job.stopped = handle.job.stopped or "interrupted"
            self._kill(handle.job, handle.hosts)

    def collect(self, handle: Handle) -> Outcome:
        if handle.job is None:
            return Outcome("failed", [], handle.error)
        job = handle.job
        lost = handle.lost[0] if handle.lost else None
        rc, records, bad, log, tail = jobs.finish(job, lambda j: self._kill(j, handle.hosts, lost))
        if job.stopped is None and rc != 0:
            handle.lost = self._lost_host(handle)  # a host gone at the same moment the launcher failed
        self._unleash(handle)
        where = ", ".join(handle.hosts)
        died = failed_node(log, handle.hosts, handle.planned.per_node) if rc != 0 else None
        if handle.lost:
            host, said = handle.lost
            outcome = Outcome("failed", records, f"{host} stopped answering during the cell (its leash's ssh: "
                                                 f"{said}); the cell's processes were killed here and, within "
                                                 f"{LEASH_GRACE_S:g} s of the last heartbeat, by its leash on {host}",
                              tail, rc)
        elif job.stopped == "timeout":
            outcome = Outcome("timeout", records, f"timed out after {self.timeout_s:g} s; the cell's processes on "
                                                  f"{where} were killed", tail, rc)
        elif job.stopped == "interrupted":
            outcome = Outcome("interrupted", records, f"interrupted; the cell's processes on {where} were killed",
                              tail, rc)
        elif died:
            outcome = Outcome("failed", records, f"{died[0]}: {died[1]} (exit code {rc}; the cell's processes on "
                                                 f"{where} were killed): {last_error(log) or 'see log.txt'}", tail, rc)
        elif rc != 0:
            outcome = Outcome("failed", records, f"exit code {rc} (on {where}): {last_error(log) or 'see log.txt'}",
                              tail, rc)
        else:
            outcome = jobs.judge(records, bad, handle.planned.cell["repeats"], tail, rc)
        outcome.log_path = job.cell_dir / "log.txt"
        return outcome

    def sweep(self, token: str) -> int:
        """A dead run's leftovers on this machine (its watchdog sweeps the other hosts)."""
        return jobs.kill_family(None, token)


def _beat(handle: Handle) -> None:
    """The heartbeat down every leash of a cell, until the cell is collected."""
    while handle.beating.is_set():
        for leash in list(handle.leashes.values()):
            try:
                leash.stdin.write(b".")
                leash.stdin.flush()
            except (OSError, ValueError):
                pass  # that leash's ssh is gone (poll sees it) or its input was closed (the cell ended)
        time.sleep(LEASH_BEAT_S)


def node_verdict(host: str, facts: dict[str, Any] | str, here: dict[str, Any], planned: PlannedCell,
                 iface: str | None, workdir: Path) -> str | None:
    """Whether one node can run its share of the cell: one line naming it, or None."""
    if isinstance(facts, str):
        return f"{host}: {facts}"
    for key, what in SAME:
        if facts.get(key) != here.get(key):
            return f"{host}: {what} {facts.get(key) or 'missing'}, this machine has {here.get(key) or 'none'}"
    if facts.get("marker") != here.get("marker") or facts.get("marker") is None:
        return f"{host}: does not see the shared workdir {workdir} (it must be the same directory on every host)"
    if planned.nodes > 1 and not facts.get("iface"):
        return f"{host}: has no interface {iface}"
    per_node = planned.per_node
    if planned.sku.is_cpu:
        if facts["cores"] < per_node:
            return f"{host}: {facts['cores']} cores for {per_node} CPU workers"
    elif facts["gpus"] < per_node:
        return f"{host}: {facts['gpus']} GPUs (nvidia-smi -L) for {per_node} workers of {planned.sku.gpu_model}"
    return None


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""
