"""Planning speed: a 100,000-cell matrix must expand and plan in ≤ 2 s (issue 2).

Run: make bench   (or: .venv/bin/python -m pytest benchmarks --benchmark-only)
"""
import math

from bench.backends.local.backend import LocalBackend
from bench.planning.matrix import load_matrix_text
from bench.planning.plan import plan_cells

BIG = """
name: big
axes:
  gpu: [K80, P40, P100, V100, V100-ND40, T4, A100-PCIe, A100, H100, H200]
  framework: [pytorch, tensorflow, keras]
  mpi: [openmpi, intelmpi, mpich, gloo]
  ib: [true, false]
  gpus: [1, 2, 4, 8, 16, 32]
  precision: [fp32, fp16, bf16]
  batch_per_gpu: [16, 32, 64, 128, 256]
  steps: [50, 100, 200]
  warmup_steps: [5, 10]
"""  # 10 × 3 × 4 × 2 × 6 × 3 × 5 × 3 × 2 = 129,600 cells


def plan_big(tmp_path):
    return plan_cells(load_matrix_text(BIG).cells(), LocalBackend(tmp_path, 60))


def test_plan_100k_cells(benchmark, tmp_path):
    planned = benchmark.pedantic(plan_big, args=(tmp_path,), rounds=5, iterations=1)
    assert len(planned) == math.prod([10, 3, 4, 2, 6, 3, 5, 3, 2]) >= 100_000
    assert len({p.cell_id for p in planned}) == len(planned)
