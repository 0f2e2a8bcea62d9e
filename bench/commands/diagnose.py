"""`bench diagnose`: find the slow node or link of a hosts allocation, or of a cell that came out below expected.
Short per-node compute probes and a transfer each way between every pair of hosts (bench/diagnose.py, over the hosts
backend's ssh); outliers named by bench/analysis/diagnose.py's rules; nothing named on a healthy allocation.
docs/diagnose.md has the rules and measured figures."""
from __future__ import annotations

from bench.commands import EXIT_FAILED, EXIT_OK
from bench.commands.shared import add_store_argument
from bench.core.errors import BenchInputError

HELP = "find the slow node or link: per-node compute probes and pairwise transfers between the hosts"


def add_arguments(parser) -> None:
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--hosts",
                       help="comma-separated host names (reached over ssh; this machine's own name runs here)")
    where.add_argument("--hostfile", help="an Open MPI hostfile (`node1 slots=2`, one host a line)")
    where.add_argument("--matrix", help="a matrix whose backend is `hosts`: its hosts and ssh settings")
    where.add_argument("--cell", metavar="SELECTION",
                       help="one cell in the store (a cell id, or key=value[,key=value] naming one cell): the hosts "
                            "its latest run's ranks ran on, and its expected value and slow rank")
    parser.add_argument("--only", choices=("compute", "links"), help="run one kind of probe only")
    add_store_argument(parser)


def _plain_ssh(host: str) -> list[str]:
    import shutil

    return [shutil.which("ssh") or "ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=20", host]


def hosts_and_ssh(args) -> tuple[list[str], object]:
    """The hosts to probe and the ssh argv prefix per host; bad input is a BenchInputError before anything runs."""
    import re

    from bench.backend_settings.hosts import HOST_NAME_PATTERN, read_hostfile

    if args.hosts is not None:
        hosts = [h.strip() for h in args.hosts.split(",") if h.strip()]
        bad = [h for h in hosts if not re.match(HOST_NAME_PATTERN, h)]
        if bad or not hosts:
            raise BenchInputError(f"--hosts: {bad[0]!r} is not a plain host name" if bad else "--hosts: no host named")
        if len(set(hosts)) != len(hosts):
            raise BenchInputError("--hosts: a host is named twice")
        return hosts, _plain_ssh
    if args.hostfile is not None:
        return [h.name for h in read_hostfile(args.hostfile)], _plain_ssh
    if args.matrix is not None:
        from pathlib import Path

        from bench.backends import make_backend
        from bench.planning.matrix import load_matrix

        settings = load_matrix(args.matrix).spec.backend
        if settings.name != "hosts" or settings.hosts is None:
            raise BenchInputError(f"--matrix: its backend is {settings.name!r}, not hosts", args.matrix)
        backend = make_backend("hosts", settings, Path("results"))
        return [h.name for h in backend.hosts], backend.ssh_argv
    return cell_hosts(args.store, args.cell), _plain_ssh


def cell_hosts(store_path: str, selection: str) -> list[str]:
    """The hosts of the cell's ranks in its newest ok record; prints its expected value and slow rank first.
    `selection`: bench/cells/selection.py's syntax, naming one cell."""
    from bench.cells.selection import describe, matches, parse_selection
    from bench.commands.lines import expected_lines, probe_entries
    from bench.store import Store

    chosen = parse_selection(selection, "--cell")
    with Store(store_path, read_only=True) as store:
        records = store.dataframe(record_json=False)
        ids = records.loc[matches(records, chosen), "cell_id"].unique() if not records.empty else []
        if len(ids) > 1:
            raise BenchInputError(f"--cell: '{describe(chosen)}' matches {len(ids)} cells; add keys so it names one",
                                  store_path)
        cell_id = ids[0] if len(ids) else selection
        windows = [w for w in store.rank_windows() if w["cell_id"] == cell_id]
        if not windows:
            raise BenchInputError(f"--cell: no successful record of cell {cell_id} in the store", store_path)
        lines = expected_lines(records, store.collectives(), store.rank_windows(), probe_entries(store_path))
    for line in lines:
        if line.strip().startswith(cell_id):
            print(line.strip())
    return list(dict.fromkeys(r["host"] for r in sorted(windows[-1]["per_rank"], key=lambda r: r["rank"])))


def run(args) -> int:
    from bench.backends.hosts.probes import ProbeError, diagnose, ssh_runner

    hosts, ssh = hosts_and_ssh(args)
    try:
        d = diagnose(hosts, ssh_runner(ssh), compute=args.only != "links", links=args.only != "compute",
                     say=lambda line: print(f"  {line}", flush=True))
    except ProbeError as e:
        print(f"bench diagnose: {e}")
        return EXIT_FAILED
    print("\n".join(d.report()))
    return EXIT_OK
