"""What ends a cell's processes when nobody else will: the watchdog beside each launcher on this machine (it
outlives a dead controller), the sweep of a token on another host, and the leash that holds a cell's processes on
another host to the controller's heartbeat. Started as `python -m bench.backends.shared.guard
--reap|--sweep|--leash`."""
from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil

from bench.backends.shared.process import TOKEN_VAR, family, kill_family, terminate

MODULE = "bench.backends.shared.guard"  # this module, as `python -m` names it
REPO_ROOT = Path(__file__).resolve().parents[3]  # what `python -m MODULE` needs on PYTHONPATH
LEASH_BEAT_S = 1.0  # the controller's heartbeat down each leash's ssh
LEASH_GRACE_S = 15.0  # a leash that hears nothing this long takes the controller (or the link) for gone


def remote_command(python: str, *args: str) -> list[str]:
    """This module's entry point as a command for another host, where the repository has the same path:
    ("--sweep", token) or ("--leash", token, grace)."""
    return ["env", f"PYTHONPATH={REPO_ROOT}", python, "-m", MODULE, *args]


# --- the watchdog -------------------------------------------------------------------------------------------------
def start_reaper(launcher_pid: int, token: str, then: tuple[str, ...] = ()) -> subprocess.Popen | None:
    """A small watchdog in a session of its own: if this controller dies (even SIGKILL, which nothing can catch),
    it kills the job's launcher group and every process carrying the cell token, runs `then` (a sweep of the other
    hosts), then exits. The controller stops it when it collects the job."""
    env = {k: v for k, v in os.environ.items() if k != TOKEN_VAR}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(REPO_ROOT), env.get("PYTHONPATH"))))
    try:
        return subprocess.Popen([sys.executable, "-m", MODULE, "--reap", str(os.getpid()), str(launcher_pid), token,
                                 *then], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError:
        return None


def stop_reaper(reaper: subprocess.Popen | None) -> None:
    """The job ended under the controller's eyes: no watch needed."""
    if reaper is None:
        return
    reaper.terminate()
    try:
        reaper.wait(timeout=5)
    except subprocess.TimeoutExpired:
        reaper.kill()


def reap_when_orphaned(controller_pid: int, launcher_pid: int, token: str, then: list[str]) -> None:
    try:
        controller = psutil.Process(controller_pid)
        born = controller.create_time()
    except psutil.Error:
        born = None
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while born is not None:
        try:
            if controller.create_time() != born or controller.status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.Error:
            break
        time.sleep(0.5)
    kill_family(launcher_pid, token)
    if then:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the remote sweep is the last thing left to do: finish it
        subprocess.run(then, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=120, check=False)


# --- the leash: bench's hold on a cell's processes on another host ------------------------------------------------
def leash(token: str, grace_s: float) -> str:
    """Runs on another host for as long as a cell runs there, started over ssh; each byte on stdin is the
    controller's heartbeat. On end of input (the cell ended, or the ssh session died) or `grace_s` without a beat
    (the link or the controller is gone: nothing else on this host would notice), it kills everything here carrying
    the token, and the processes between them and sshd that the launcher started (Open MPI's orted, Hydra's proxy,
    a remote shell): those carry no token, yet would wait on a dead link for minutes."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # the session's end is read as end of input, then swept
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt))
    fd = sys.stdin.fileno()
    between: dict[int, psutil.Process] = {}
    why = "end of input"
    try:
        while True:
            ready, _, _ = select.select([fd], [], [], grace_s)
            if not ready:
                why = f"no heartbeat for {grace_s:g} s"
                break
            if not os.read(fd, 4096):
                break
            for p in family(None, token):
                for parent in _launcher_chain(p):
                    between.setdefault(parent.pid, parent)
    except KeyboardInterrupt:
        why = "terminated"
    killed = kill_family(None, token)
    alive = []
    for p in between.values():
        try:
            if p.is_running():  # same process (psutil compares the start time), not a reused pid
                alive.append(p)
        except psutil.Error:
            pass
    terminate(alive)
    return f"leash on {socket.gethostname()}: {why}; {killed} process(es) of the cell killed"


def _launcher_chain(p: psutil.Process) -> list[psutil.Process]:
    """p's ancestors below the ssh session (sshd) that started them; none if p was not started through sshd."""
    chain = []
    try:
        for parent in p.parents():
            if parent.name().startswith("sshd"):
                return chain
            chain.append(parent)
    except psutil.Error:
        pass
    return []


def main(argv: list[str]) -> None:
    if argv[:1] == ["--reap"]:
        reap_when_orphaned(int(argv[1]), int(argv[2]), argv[3], argv[4:])
    elif argv[:1] == ["--sweep"]:
        # Run on another host over ssh: end whatever carries the cell token there.
        print(kill_family(None, argv[1]))
    elif argv[:1] == ["--leash"]:
        print(f"leash up on {socket.gethostname()}", flush=True)
        said = leash(argv[1], float(argv[2]))
        try:
            print(said, flush=True)
        except OSError:
            pass  # the session is gone: nobody to tell


if __name__ == "__main__":
    main(sys.argv[1:])
