"""`bench diagnose`'s probes: models/probes/diag_probe.py on each host, over the hosts backend's ssh (or here, for this
machine), one at a time so that no probe competes with another; the rules that name a node or a link are pure, in
bench/analysis/diagnose.py.

Bounded: the compute probes run on every host at once, ROUNDS rounds of COMPUTE_S; each directed transfer runs
LINK_S, one at a time (n(n−1) of them, from n sender calls), plus one more for each direction that measured slow;
each ssh call ends within CALL_TIMEOUT_S.
"""
from __future__ import annotations

import json
import shlex
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

from bench.analysis.diagnose import LINK_BELOW, ROUNDS, Finding, compute_findings, link_findings, node_compute
from bench.backends.shared.cell_launch import MODELS_DIR

PROBE = MODELS_DIR / "probes" / "diag_probe.py"
COMPUTE_S = 1.0
START_AFTER_S = 10.0  # every host's ssh connects and its probe waits for the common start
LINK_S = 0.5
CALL_TIMEOUT_S = 30


class ProbeError(RuntimeError):
    """A probe that could not run or answer: the host and why."""


@dataclass
class Diagnosis:
    hosts: list[str]
    compute: dict = field(default_factory=dict)  # host → NodeCompute
    directed: dict = field(default_factory=dict)  # (sender, receiver) → bytes/s
    findings: list[Finding] = field(default_factory=list)
    seconds: float = 0.0

    def report(self) -> list[str]:
        lines = [f"diagnose: {len(self.hosts)} hosts ({', '.join(self.hosts)}), {self.seconds:.0f} s"]
        if self.compute:
            rates = ", ".join(f"{h} {n.rate:,.0f}/s ({n.ratio:.2f}×)" for h, n in self.compute.items())
            lines.append(f"compute (probe kernels per second, median of {ROUNDS} rounds; × the median): {rates}")
        if self.directed:
            rates = ", ".join(f"{a}→{b} {bw / 1e6:.1f}" for (a, b), bw in self.directed.items())
            lines.append(f"links (MB/s, sender→receiver): {rates}")
        lines += [f"SLOW {f.text}" for f in self.findings] or ["nothing named: no node or link is an outlier"]
        return lines


def ssh_runner(ssh_prefix: Callable[[str], list[str]], python: str = sys.executable) -> Callable:
    """A function that turns (host, probe args) into the argv running the probe there: over ssh, or directly for
    this machine's own name."""
    here = {socket.gethostname(), "localhost", "127.0.0.1"}

    def argv(host: str, *args: str) -> list[str]:
        cmd = [python, str(PROBE), *args]
        return cmd if host in here else [*ssh_prefix(host), shlex.join(cmd)]

    return argv


def _json_of(host: str, done: subprocess.CompletedProcess | tuple[int, str, str]) -> dict:
    code, out, err = (done.returncode, done.stdout, done.stderr) if isinstance(done, subprocess.CompletedProcess) \
        else done
    try:
        return json.loads(out.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        last = (err.strip().splitlines() or [f"exit {code}"])[-1]
        raise ProbeError(f"{host}: the probe failed ({last})") from None


def probe_compute(argv: Callable, hosts: list[str]) -> dict[str, list[dict]]:
    """ROUNDS compute rounds on every host, round i at the same wall-clock moment everywhere (START_AFTER_S from now:
    time for every ssh to connect)."""
    start = time.time() + START_AFTER_S
    procs = {h: subprocess.Popen(argv(h, "compute", str(COMPUTE_S), str(ROUNDS), f"{start:.3f}"), text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
             for h in hosts}
    out = {}
    try:
        for h, proc in procs.items():
            o, e = proc.communicate(timeout=CALL_TIMEOUT_S + START_AFTER_S + ROUNDS * COMPUTE_S)
            out[h] = _json_of(h, (proc.returncode, o, e))
    except subprocess.TimeoutExpired:
        raise ProbeError(f"the compute probes did not answer within {CALL_TIMEOUT_S} s") from None
    finally:
        _kill_unfinished(procs.values())
    return out


def _port_of(host: str, proc: subprocess.Popen) -> str:
    first = proc.stdout.readline().split()
    if first[:1] != ["port"] or len(first) != 2:
        proc.kill()
        raise ProbeError(f"{host}: the receiver did not start ({(proc.stderr.read() or '').strip()[-200:]})")
    return first[1]


def probe_all_links(argv: Callable, hosts: list[str],
                    pairs: list[tuple[str, str]] | None = None) -> dict[tuple[str, str], float]:
    """Every ordered pair of `hosts` once (or just `pairs`): a receiver on every receiving host (started together,
    idle until spoken to), then each sending host in turn sends to its receivers, one transfer at a time.
    (sender, receiver) → bytes/s as the receiver counted."""
    pairs = pairs if pairs is not None else [(a, b) for a in hosts for b in hosts if a != b]
    receivers = {b: sum(1 for _, r in pairs if r == b) for _, b in pairs}
    servers = {h: subprocess.Popen(argv(h, "serve", str(LINK_S), str(n)), stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
               for h, n in receivers.items()}
    try:
        ports = {h: _port_of(h, p) for h, p in servers.items()}
        for a in dict.fromkeys(s for s, _ in pairs):
            targets = [f"{b}:{ports[b]}" for s, b in pairs if s == a]
            try:
                sent = subprocess.run(argv(a, "send-all", str(LINK_S), *targets), capture_output=True, text=True,
                                      timeout=CALL_TIMEOUT_S + len(targets) * LINK_S, stdin=subprocess.DEVNULL)
            except subprocess.TimeoutExpired:
                raise ProbeError(f"{a}: its transfers did not end within {CALL_TIMEOUT_S} s") from None
            _json_of(a, sent)
        directed = {}
        for b, proc in servers.items():
            out, err = proc.communicate(timeout=CALL_TIMEOUT_S)
            for got in _json_of(b, (proc.returncode, out, err)):
                if not got.get("bytes_per_s") or got.get("from") not in hosts:
                    raise ProbeError(f"link {got.get('from')}→{b}: nothing arrived")
                directed[(got["from"], b)] = float(got["bytes_per_s"])
        return {pair: directed[pair] for pair in pairs}
    except subprocess.TimeoutExpired:
        raise ProbeError(f"the receivers did not answer within {CALL_TIMEOUT_S} s") from None
    finally:
        _kill_unfinished(servers.values())


def diagnose(hosts: list[str], argv: Callable, *, compute: bool = True, links: bool = True,
             say: Callable[[str], None] = lambda line: None) -> Diagnosis:
    t0 = time.monotonic()
    d = Diagnosis(list(hosts))
    if compute:
        d.compute = node_compute(probe_compute(argv, hosts))
        say(f"compute: {ROUNDS} rounds, every host at the same moments")
        d.findings += compute_findings(d.compute)
    if links and len(hosts) > 1:
        d.directed = probe_all_links(argv, hosts)
        say(f"{len(d.directed)} directed transfers done")
        # A direction under the rule's line is measured once more and its better figure kept: a passing load lowers
        # one transfer, a slow link both.
        again = [pair for pair, bw in d.directed.items() if bw < LINK_BELOW * statistics.median(d.directed.values())]
        if again:
            for pair, bw in probe_all_links(argv, hosts, again).items():
                d.directed[pair] = max(d.directed[pair], bw)
            say(f"{len(again)} slow direction(s) measured again")
        d.findings += link_findings(d.directed)
    d.seconds = time.monotonic() - t0
    return d


def _kill_unfinished(procs) -> None:
    """The probes' ssh clients still running after a timeout or an error: killed and reaped, never left behind."""
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
