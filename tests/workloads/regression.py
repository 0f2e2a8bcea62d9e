"""A workload registered from outside bench/ (models/registry/workloads.py, BENCH_WORKLOADS=tests.workloads.regression):
a small linear regression trained data-parallel under DDP, a sample being one row of features. It exists to prove the
registry is the one place a workload is declared: tests/test_registered_workload.py plans, runs, stores and reports
it with no edit under bench/."""
from pathlib import Path

from models.workloads.gradients import Gradient

FEATURES = 64


def _gradients(cell):
    # The weight, then the bias, in backward's order: one layer, both ready at the end of the backward pass.
    return [Gradient("linear.weight", FEATURES * FEATURES, 1.0), Gradient("linear.bias", FEATURES, 1.0)]


WORKLOADS = {
    "regression-test": {
        "script": str(Path(__file__).with_name("regression_worker.py")),
        "version": "1",
        "frameworks": ("pytorch",),
        "engines": ("native",),
        "sample_unit": "row",
        "rate_unit": "rows/s",
        "title": "Linear regression (rows/s)",
        "argv": (("--batch-size", "batch_per_gpu"), ("--warmup-steps", "warmup_steps"), ("--steps", "steps"),
                 ("--repeats", "repeats")),
        "gradients": _gradients,
        "flops_per_sample": lambda cell: 6 * FEATURES * FEATURES,  # forward 2·d², backward twice that
    },
}
