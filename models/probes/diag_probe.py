"""Short probes `bench diagnose` runs on each node (over the hosts backend's ssh, or here), to find a slow node or
link. Imports nothing from the control plane: a node needs only models/. Each prints one JSON object on its last line.

    python models/probes/diag_probe.py compute SECONDS [ROUNDS START]  a fixed single-threaded kernel (integer work)
                                                       for SECONDS, ROUNDS times, round i starting at wall-clock
                                                       START + i·(SECONDS + GAP) so that every node's probes run
                                                       at the same moments: a list of rounds, each with its
                                                       rate, the CPUs it may run on, the kernel it runs on (which
                                                       nodes share a machine), and the CPU seconds per second the
                                                       node's other processes used meanwhile
    python models/probes/diag_probe.py recv SECONDS           listens on an ephemeral port, prints `port N` first, takes
                                                       one sender's bytes until it closes (or SECONDS + 10 pass):
                                                       the bytes and the seconds from the first byte to the last
    python models/probes/diag_probe.py send HOST PORT SECONDS sends zeros to HOST:PORT for SECONDS, then closes
    python models/probes/diag_probe.py serve SECONDS COUNT    `recv` for COUNT senders in turn, each naming itself
    first:
                                                       a list of {from, bytes, seconds, bytes_per_s}
    python models/probes/diag_probe.py send-all SECONDS HOST:PORT...  `send` to each in turn, naming this host first

The receiver times the transfer, so a rate is what really arrived over the link.
"""
from __future__ import annotations

import json
import os
import socket
import sys
import time

CHUNK = 1 << 16
KERNEL_STEPS = 10_000  # about a millisecond of one core
GAP_S = 0.3  # between two rounds of compute probes


def _cpu_ticks_of_others(me: int) -> dict[tuple[int, int], int]:
    """utime + stime clock ticks of every process this node's /proc shows, except this one, by (pid, start time):
    the start time tells a reused pid from the process that had it."""
    ticks = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == me:
            continue
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            # utime, stime, starttime: fields 14, 15 and 22 of stat (counted from the pid, 1-based)
            ticks[(int(pid), int(fields[19]))] = int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            continue  # a process that ended meanwhile
    return ticks


def others_cpu_ticks(before: dict[tuple[int, int], int], after: dict[tuple[int, int], int]) -> int:
    """Ticks the other processes used between two samples: each process still there counts its growth, one started
    meanwhile all of its ticks. One that ended meanwhile is not seen (its last ticks are lost): an undercount, never
    below zero. (Summing the two samples' totals instead went negative when processes ended between them: -14 CPU
    seconds per second in one run of the test suite.)"""
    return sum(max(0, n - before.get(key, 0)) for key, n in after.items())


def _kernel(n: int) -> int:
    """A fixed piece of single-threaded integer work (no import: a probe's start-up stays short)."""
    x = 1
    for i in range(n):
        x = (x * 1103515245 + i) & 0xFFFFFFFF
    return x


def compute_rounds(seconds: float, rounds: int, start: float | None) -> list[dict]:
    out = []
    for i in range(rounds):
        late = 0.0
        if start is not None:
            wait = start + i * (seconds + GAP_S) - time.time()
            time.sleep(max(0.0, wait))
            late = max(0.0, -wait)
        out.append({"round": i, "late_s": late, **compute(seconds)})
    return out


def compute(seconds: float) -> dict:
    before, t0 = _cpu_ticks_of_others(os.getpid()), time.perf_counter()
    n, end = 0, t0 + seconds
    while time.perf_counter() < end:
        _kernel(KERNEL_STEPS)
        n += 1
    elapsed = time.perf_counter() - t0
    others = others_cpu_ticks(before, _cpu_ticks_of_others(os.getpid())) / os.sysconf("SC_CLK_TCK")
    return {"host": socket.gethostname(), "kernels_per_s": n / elapsed, "seconds": elapsed,
            "cpus": sorted(os.sched_getaffinity(0)), "machine": _machine(),
            "others_cpu_s_per_s": others / elapsed}


def _machine() -> str | None:
    """Which machine this node is: its machine id. Not the boot id, nor the boot time: the emulated cluster gives each
    node a boot id and a time namespace of its own, to look like separate machines, while its nodes share the kernel
    and, pinned, its CPUs."""
    try:
        with open("/etc/machine-id") as f:
            return f.read().strip() or None
    except OSError:
        return None


NAME_BYTES = 64  # a sender's host name, padded: the first bytes of each `send-all` connection


def _take(conn: socket.socket, named: bool) -> dict:
    """One sender's bytes until it closes; timed from the first payload byte to the last."""
    name, got, first, last = b"", 0, None, None
    while True:
        data = conn.recv(CHUNK)
        if not data:
            break
        if named and len(name) < NAME_BYTES:
            cut = NAME_BYTES - len(name)
            name, data = name + data[:cut], data[cut:]
            if not data:
                continue
        last = time.perf_counter()
        first = first or last
        got += len(data)
    span = (last - first) if first is not None and last > first else None
    return {"from": name.rstrip(b"\0").decode() or None, "bytes": got, "seconds": span,
            "bytes_per_s": got / span if span else None}


def serve(seconds: float, count: int, named: bool = True) -> list[dict]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as srv:
        srv.bind(("0.0.0.0", 0))
        srv.listen(count)
        srv.settimeout(60 + count * (seconds + 10))
        print(f"port {srv.getsockname()[1]}", flush=True)
        out = []
        for _ in range(count):
            conn, peer = srv.accept()
            with conn:
                conn.settimeout(seconds + 10)
                out.append({"host": socket.gethostname(), "peer": peer[0], **_take(conn, named)})
    return out


def recv(seconds: float) -> dict:
    return serve(seconds, 1, named=False)[0]


def send(host: str, port: int, seconds: float, name: bytes = b"") -> dict:
    buf = bytes(CHUNK)
    sent = 0
    with socket.create_connection((host, port), timeout=10) as conn:
        if name:
            conn.sendall(name[:NAME_BYTES].ljust(NAME_BYTES, b"\0"))
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            conn.sendall(buf)
            sent += len(buf)
    return {"host": socket.gethostname(), "to": host, "bytes": sent}


def send_all(seconds: float, targets: list[str]) -> list[dict]:
    me = socket.gethostname().encode()
    out = []
    for target in targets:
        host, port = target.rsplit(":", 1)
        out.append(send(host, int(port), seconds, name=me))
    return out


def main(argv: list[str]) -> int:
    try:
        if argv[:1] == ["compute"] and len(argv) in (2, 4):
            out = compute_rounds(float(argv[1]), int(argv[2]) if len(argv) == 4 else 1,
                                 float(argv[3]) if len(argv) == 4 else None)
        elif argv[:1] == ["recv"] and len(argv) == 2:
            out = recv(float(argv[1]))
        elif argv[:1] == ["send"] and len(argv) == 4:
            out = send(argv[1], int(argv[2]), float(argv[3]))
        elif argv[:1] == ["serve"] and len(argv) == 3:
            out = serve(float(argv[1]), int(argv[2]))
        elif argv[:1] == ["send-all"] and len(argv) >= 3:
            out = send_all(float(argv[1]), argv[2:])
        else:
            print("usage: diag_probe.py compute S [ROUNDS] | recv S | send HOST PORT S | serve S COUNT | "
                  "send-all S HOST:PORT...", file=sys.stderr)
            return 2
    except OSError as e:
        print(f"diag_probe: {e}", file=sys.stderr)
        return 1
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
