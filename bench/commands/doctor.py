"""`bench doctor`: what this machine can run; exit 1 when the default matrix's cpu cells could not."""
from __future__ import annotations

HELP = "what this machine can run"


def add_arguments(parser) -> None:
    pass


def run(args) -> int:
    from bench.execution.doctor import report

    text, code = report()
    print(text)
    return code
