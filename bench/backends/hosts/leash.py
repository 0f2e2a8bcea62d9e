"""The hosts backend's hold on a cell's processes on its other hosts: one leash per host (bench.backends.shared.guard's,
run there over ssh) with the heartbeat down them, and the sweep of the cell's token there."""
from __future__ import annotations

import shlex
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.backends.hosts.nodes import last_line
from bench.backends.shared.guard import LEASH_BEAT_S, LEASH_GRACE_S, remote_command
from bench.backends.shared.records import read_end

SWEEP_TIMEOUT_S = 30
# A leash's ssh gives up on a host that stops answering (a link down, a dead machine) after 3 unanswered probes 2 s
# apart: the cell fails, naming the host, seconds after the link goes rather than at the cell's timeout.
LEASH_SSH = ("-o", "ServerAliveInterval=2", "-o", "ServerAliveCountMax=3")


@dataclass
class Leashes:
    """A cell's leashes: host -> the ssh running its leash (output in <cell dir>/leash-<host>.txt)."""

    token: str
    cell_dir: Path | None = None
    by_host: dict[str, subprocess.Popen] = field(default_factory=dict)
    beating: threading.Event = field(default_factory=threading.Event)  # cleared when the heartbeat must stop

    def start(self, hosts: list[str], ssh_argv, python: str, cell_dir: Path) -> None:
        """A leash over ssh on every host given, and the heartbeat down them. A leash's ssh that ends while the
        cell runs means its host stopped answering; a leash that stops hearing the beat ends the cell's processes
        on its host by itself (the link may be down: no sweep from here could reach them)."""
        self.cell_dir = cell_dir
        for host in hosts:
            command = shlex.join(remote_command(python, "--leash", self.token, f"{LEASH_GRACE_S:g}"))
            ssh = ssh_argv(host)
            argv = [*ssh[:-1], *LEASH_SSH, ssh[-1], command]
            with open(cell_dir / f"leash-{host}.txt", "wb") as out:
                try:
                    self.by_host[host] = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=out,
                                                          stderr=subprocess.STDOUT, start_new_session=True)
                except OSError:
                    continue  # no ssh: the node check said so already
        if self.by_host:
            self.beating.set()
            threading.Thread(target=self._beat, daemon=True, name=f"leash-beat {self.token}").start()

    def lost(self) -> tuple[str, str] | None:
        """A host whose leash's ssh ended while the cell ran: (host, ssh's last words)."""
        for host, leash in self.by_host.items():
            if leash.poll() is not None:
                said = last_line(read_end(self.cell_dir / f"leash-{host}.txt", 4096))
                if not said or said.startswith("leash "):  # the leash's own line: ssh itself said nothing
                    said = (f"no answer to {LEASH_SSH[-1].split('=')[1]} keep-alives {LEASH_SSH[1].split('=')[1]} s "
                            f"apart" if leash.returncode == 255 else "")
                return host, f"exit {leash.returncode}" + (f", {said}" if said else "")
        return None

    def release(self) -> None:
        """Ends the heartbeat and closes each leash's input: a leash that still hears sweeps its host and exits."""
        self.beating.clear()
        for leash in self.by_host.values():
            try:
                leash.stdin.close()
            except OSError:
                pass
        for leash in self.by_host.values():
            try:
                leash.wait(timeout=SWEEP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                leash.kill()
                leash.wait()

    def _beat(self) -> None:
        """The heartbeat down every leash of the cell, until the cell is collected."""
        while self.beating.is_set():
            for leash in list(self.by_host.values()):
                try:
                    leash.stdin.write(b".")
                    leash.stdin.flush()
                except (OSError, ValueError):
                    pass  # that leash's ssh is gone (poll sees it) or its input was closed (the cell ended)
            time.sleep(LEASH_BEAT_S)


def sweep_argv(ssh: list[str], python: str, token: str) -> list[str]:
    """ssh to a host that ends whatever carries the token there."""
    return [*ssh, shlex.join(remote_command(python, "--sweep", token))]


def sweep(ssh_argvs: list[list[str]]) -> None:
    """The sweeps, in parallel, each within SWEEP_TIMEOUT_S."""
    from concurrent.futures import ThreadPoolExecutor

    if ssh_argvs:
        with ThreadPoolExecutor(max_workers=min(16, len(ssh_argvs))) as pool:
            list(pool.map(lambda argv: subprocess.run(argv, capture_output=True, timeout=SWEEP_TIMEOUT_S,
                                                      stdin=subprocess.DEVNULL, check=False), ssh_argvs))


def sweep_command(sweeps: list[list[str]]) -> tuple[str, ...]:
    """One shell command that runs every sweep in parallel (for the watchdog, if the controller dies)."""
    if not sweeps:
        return ()
    return ("sh", "-c", " ".join(shlex.join(argv) + " &" for argv in sweeps) + " wait")
