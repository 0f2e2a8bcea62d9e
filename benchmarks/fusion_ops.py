"""How many allreduce operations Horovod's tensor fusion makes of one ResNet-50 step (bench/analysis/fusion.py), to
set beside what a Horovod timeline counts (benchmarks/timeline_ops.py) for the same cell.

    python benchmarks/fusion_ops.py --image-size 64 --backward-s 0.69 --alpha-ms 1.2 --gbps 0.88

--backward-s: the backward pass's seconds (2/3 of a 1-worker step's compute, whatif.BACKWARD_FRACTION);
--alpha-ms and --gbps: one allreduce's latency and bandwidth on the link (a collective sweep's fit,
docs/collectives.md).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.analysis.fusion import DEFAULT_CYCLE_S, DEFAULT_THRESHOLD_BYTES, resnet50_gradients, simulate  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--backward-s", type=float, required=True)
    p.add_argument("--alpha-ms", type=float, required=True)
    p.add_argument("--gbps", type=float, required=True, help="GB/s")
    p.add_argument("--cycle-ms", type=float, default=DEFAULT_CYCLE_S * 1000)
    p.add_argument("--threshold-mb", type=float, default=DEFAULT_THRESHOLD_BYTES / 2**20)
    p.add_argument("--precision-bytes", type=int, default=4)
    a = p.parse_args(argv)
    for name in ("backward_s", "alpha_ms", "gbps", "cycle_ms"):
        if not getattr(a, name) > 0:
            p.error(f"--{name.replace('_', '-')} must be positive, got {getattr(a, name):g}")
    if a.threshold_mb < 0 or a.precision_bytes < 1:
        p.error("--threshold-mb must be 0 or more (0: no fusion) and --precision-bytes at least 1")
    s = simulate(resnet50_gradients(a.image_size), a.backward_s, lambda n: a.alpha_ms / 1000 + n / (a.gbps * 1e9),
                 cycle_s=a.cycle_ms / 1000, threshold_bytes=int(a.threshold_mb * 2**20),
                 bytes_per_param=a.precision_bytes)
    sizes = sorted(op.nbytes for op in s.operations)
    print(f"{s.count} operations a step for 161 gradient tensors ({a.image_size} px, backward {a.backward_s:g} s, "
          f"cycle {a.cycle_ms:g} ms, threshold {a.threshold_mb:g} MiB); {s.after_backward} end after the backward "
          f"pass, the last {1000 * s.tail_s:.1f} ms after it; on the link {1000 * s.busy_s:.0f} ms in all; "
          f"operation sizes {sizes[0]:,}–{sizes[-1]:,} B, median {sizes[len(sizes) // 2]:,}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
