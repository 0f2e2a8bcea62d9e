"""The `bench` entry point: build the parser from the verbs in bench/commands/, dispatch, and map errors to exit codes
here and nowhere else: 0 ok, 1 a cell or the run failed, 2 bad input or usage (one line on stderr, nothing run or
written), 130 Ctrl-C, 143 SIGTERM. A storage failure is bench.store's StoreError, a BenchInputError: the --store
given cannot be used (exit 2), unless `bench run` met it while recording and said so as RunFailed (exit 1)."""
from __future__ import annotations

import argparse
import signal
import sys

from bench.analysis import AnalysisError
from bench.commands import EXIT_FAILED, EXIT_OK, EXIT_USAGE, VERBS, command
from bench.errors import BenchInputError, RunFailed

__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "Terminated", "build_parser", "main"]


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
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
