"""The `bench` entry point: build the parser from the verbs in bench/commands/, dispatch, and map errors to exit codes
here and nowhere else: 0 ok, 1 a cell or the run failed, 2 bad input or usage (one line on stderr, nothing run or
written), 70 an internal error (a bug: one line on stderr naming the file that holds the traceback; sysexits'
EX_SOFTWARE), 130 Ctrl-C, 141 stdout closed by its reader (`bench plan m.yaml | head`: quiet, as Unix tools end on
SIGPIPE), 143 SIGTERM. A storage failure is bench.store's StoreError, a BenchInputError: the --store given cannot
be used (exit 2), unless `bench run` met it while recording and said so as RunFailed (exit 1)."""
from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
import traceback

from bench.analysis import AnalysisError
from bench.commands import EXIT_FAILED, EXIT_OK, EXIT_USAGE, VERBS, command
from bench.core.errors import BenchInputError, RunFailed

__all__ = ["EXIT_BUG", "EXIT_FAILED", "EXIT_OK", "EXIT_PIPE", "EXIT_USAGE", "Terminated", "build_parser", "main"]

EXIT_BUG = 70  # sysexits' EX_SOFTWARE: an internal error
EXIT_PIPE = 128 + signal.SIGPIPE  # what a shell reports for a Unix tool ended by its reader closing the pipe


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C (running cells stopped and recorded) but exiting 143."""


def _on_sigterm(signum, frame):
    raise Terminated()


class _Parser(argparse.ArgumentParser):
    """Sub-parsers are made of the parent's class (argparse's default), so every level reports usage errors so."""

    def error(self, message: str) -> None:  # one line, exit 2 (argparse prints usage too; keep it to one line)
        raise BenchInputError(f"usage: {message} (see `bench {self.prog.split()[-1]} --help`)"
                              if " " in self.prog else f"usage: {message}")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="bench", description="Distributed training throughput benchmarks (Horovod ResNet-50).")
    sub = p.add_subparsers(dest="verb", required=True)
    for verb in VERBS:
        module = command(verb)
        module.add_arguments(sub.add_parser(verb, help=module.HELP))
    return p


def main(argv: list[str] | None = None) -> int:
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    # Ctrl-C must stop the running cells and record them, even when bench was started with SIGINT ignored (as a
    # shell's background jobs are): Python then installs no KeyboardInterrupt handler of its own.
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        if any("\x00" in a for a in (sys.argv[1:] if argv is None else argv)):
            # No real command line holds one (the OS cannot pass it); only a caller of main() can.
            raise BenchInputError("an argument holds a NUL character")
        args = build_parser().parse_args(argv)
        return command(args.verb).run(args)
    except (BenchInputError, AnalysisError) as e:
        print(f"bench: error: {' '.join(str(e).split())}", file=sys.stderr)
        return EXIT_USAGE
    except RunFailed as e:
        print(f"bench: error: {e}", file=sys.stderr)
        return EXIT_FAILED
    except Terminated:
        print("bench: terminated; the running cell was stopped and recorded as interrupted", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print("bench: interrupted; the running cell was stopped and recorded as interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        _quiet_stdout()
        return EXIT_PIPE
    except Exception as e:  # noqa: BLE001  (a bug: one line, the traceback kept in a file)
        where = _keep_traceback()
        print(f"bench: internal error (a bug): {type(e).__name__}: {' '.join(str(e).split())[:300]}; "
              f"traceback in {where}", file=sys.stderr)
        return EXIT_BUG
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)


def _quiet_stdout() -> None:
    """The reader went away: point stdout at /dev/null so the interpreter's final flush does not complain."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _keep_traceback() -> str:
    """Writes the current exception's traceback to a file in the temporary folder; its path (or why not)."""
    try:
        fd, path = tempfile.mkstemp(prefix=f"bench-bug-{time.strftime('%Y%m%dT%H%M%S')}-", suffix=".txt")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(f"bench {' '.join(sys.argv[1:])}\n\n{traceback.format_exc()}")
        return path
    except OSError as e:
        return f"(not written: {e.strerror or e})"
