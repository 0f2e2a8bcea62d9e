"""How a worker refuses: one clear line on stderr and exit code 2, which the harness records as the cell's reason.
A module of its own so that every worker module can refuse without importing the others (no import circle)."""
from __future__ import annotations

import sys


def fail(message: str) -> None:
    print(f"bench worker: error: {message}", file=sys.stderr, flush=True)
    sys.exit(2)
