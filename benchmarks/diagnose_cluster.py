"""`bench diagnose` on the emulated cluster (docs/diagnose.md's figures): 4 nodes pinned on this machine's CPUs,
every link shaped to RATE; then three cases, each diagnosed from node1:

    healthy        nothing should be named
    slow link      node3's egress shaped to a quarter of RATE: node3's links (and node3) should be named
    busy core      two busy loops on node3, each in a session of its own (raised priority, bounded in time,
                   killed after): node3 for compute (and node1, which shares its CPU)

    python benchmarks/diagnose_cluster.py [--prefix i25] [--state /tmp/bench-cluster-i25] [--cases healthy,link,cpu]

Brings the cluster up and always tears it down. Prints each case's findings and wall time.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests import cluster as emulated  # noqa: E402

RATE, SLOW_RATE = "200mbit", "50mbit"
HOG_NICE = -5  # a busy process at a raised priority (as a system daemon may run): it takes its core's larger share
HOG_S = 90  # the hog ends by itself after this, killed earlier when the case is done


def diagnose(c: emulated.Cluster, only: str | None = None) -> tuple[int, str, float]:
    argv = [sys.executable, "-m", "bench", "diagnose", "--hosts", ",".join(c.hosts),
            *(["--only", only] if only else [])]
    t0 = time.monotonic()
    done = c.run("node1", argv, env=c.env({"PYTHONPATH": str(ROOT)}), timeout=300)
    return done.returncode, done.stdout + done.stderr, time.monotonic() - t0


def named(output: str) -> list[str]:
    return [line.removeprefix("SLOW ") for line in output.splitlines() if line.startswith("SLOW ")]


HOGS = 2  # busy loops, each in a session of its own (below)


def start_hog(c: emulated.Cluster, node: str) -> list:
    """HOGS busy loops on `node`'s core, each in a new session, as a daemon of that node would run. With the kernel's
    autogroups (/proc/sys/kernel/sched_autogroup_enabled = 1 here) a CPU is shared between sessions first: a loop
    started in this script's session slowed this session's other process on the core (node1's own probe, which
    `bench diagnose` runs from node1 in the session that started it) and left node3's probe, reached over ssh in a
    session of its own, untouched — and node1 was named instead of node3, twice on a quiet machine."""
    return [c.popen(node, ["timeout", str(HOG_S), "nice", "-n", str(HOG_NICE), sys.executable, "-c",
                           "while True: pass"], start_new_session=True) for _ in range(HOGS)]


def stop(procs: list) -> None:
    """Ends the hogs: `timeout` (the process entered in the node) passes SIGTERM on to the busy loop."""
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(10)
        except Exception:
            proc.kill()
            proc.wait()


def run_case(c: emulated.Cluster, case: str) -> tuple[int, str, float]:
    if case == "healthy":
        return diagnose(c)
    if case == "link":
        c.shape(rate=SLOW_RATE, node="node3")
        try:
            return diagnose(c, "links")
        finally:
            c.shape(rate=RATE, node="node3")
    if case == "cpu":
        hog = start_hog(c, "node3")
        try:
            time.sleep(1)
            return diagnose(c, "compute")
        finally:
            stop(hog)
    raise SystemExit(f"unknown case {case!r}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prefix", default="i25")
    p.add_argument("--state", default="/tmp/bench-cluster-i25")
    p.add_argument("--cases", default="healthy,link,cpu")
    args = p.parse_args()
    c = emulated.start(4, pin=True, state=Path(args.state), prefix=args.prefix)
    try:
        c.shape(rate=RATE)
        for case in args.cases.split(","):
            code, out, wall = run_case(c, case)
            print(f"== {case}: exit {code}, {wall:.0f} s wall, {time.strftime('%H:%M UTC', time.gmtime())}")
            print(out.strip())
    finally:
        c.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
