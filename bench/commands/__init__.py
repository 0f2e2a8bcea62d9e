"""The verbs of `bench`, one module each (asv's commands/ layout): `HELP`, one line for `bench --help`;
`add_arguments(parser)`, the verb's options; `run(args) -> int`, the verb itself, returning its exit code.

bench/cli.py builds the parser from VERBS and maps errors to exit codes in one place: a verb raises
BenchInputError (or analysis' AnalysisError) for bad input and RunFailed for a run it could not finish; it prints
its results and returns EXIT_OK or EXIT_FAILED. A verb module imports only light things at its top (the parser is
built from every module on every call); what its `run` needs it imports there.
"""
from __future__ import annotations

import importlib
from types import ModuleType

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


# Verb → its module under bench/commands/, in the order `bench --help` lists them (`import` is a Python keyword).
VERBS: dict[str, str] = {
    "plan": "plan", "run": "run", "status": "status", "report": "report", "import": "import_", "export": "export",
    "doctor": "doctor", "images": "images", "data": "data", "check": "check", "baseline": "baseline", "ab": "ab",
    "history": "history", "model": "model", "diagnose": "diagnose",
}


def command(verb: str) -> ModuleType:
    return importlib.import_module(f"{__name__}.{VERBS[verb]}")
