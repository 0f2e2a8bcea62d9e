"""How long `bench model --layouts` takes to answer for Llama 3 8B and 70B on 64 H100s over InfiniBand (docs/layouts.md:
the target is under 10 s each, on a quiet 2-core machine). Prints each command's wall time; exit 1 over the target."""
from __future__ import annotations

import subprocess
import sys
import time

TARGET_S = 10.0
ASKS = [["--model", "llama3-8b"], ["--model", "llama3-70b"]]


def main() -> int:
    worst = 0.0
    for ask in ASKS:
        argv = [sys.executable, "-m", "bench", "model", "--layouts", *ask, "--gpu", "H100", "--nodes", "8", "--fabric",
                "ib"]
        start = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        took = time.perf_counter() - start
        worst = max(worst, took)
        print(f"{' '.join(argv[2:])}: {took:.2f} s")
    return 0 if worst < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
