"""The registered test workload's worker: a linear regression under DDP (torchrun or an MPI launcher), measured by
the same barrier-bounded windows as every bench workload (models/measure/common.py)."""
import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from models.measure.common import SampleRate, measure_windows, single_process_comm  # noqa: E402
from models.workloads import torch_native  # noqa: E402
from tests.workloads.regression import FEATURES  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser()
    for flag, default in (("--batch-size", 32), ("--warmup-steps", 2), ("--steps", 10), ("--repeats", 2),
                          ("--threads", 1)):
        p.add_argument(flag, type=int, default=default)
    for flag in ("--cell-id", "--run-id", "--out"):
        p.add_argument(flag, default=None)
    args = p.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    # Under a launcher, DDP; with none (bench's compute probe runs the cell's program alone), one plain process.
    launched = "MASTER_PORT" in os.environ
    comm = torch_native.init(torch)[0] if launched else single_process_comm()
    torch.manual_seed(0)
    model = torch.nn.Linear(FEATURES, FEATURES)
    if launched:
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    target = torch.randn(FEATURES, FEATURES, generator=torch.Generator().manual_seed(1))
    rows = torch.randn(args.batch_size, FEATURES, generator=torch.Generator().manual_seed(2 + comm.rank))

    def step(_batch):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(rows), rows @ target)
        loss.backward()
        opt.step()
        return loss

    base = {"framework": "pytorch", "workload": "regression-test", "workload_version": "1", "engine": "native",
            "device": "cpu", "batch_per_worker": args.batch_size, "threads_per_worker": args.threads,
            "sample_unit": "row"}
    args.data, args.precision = "synthetic", "fp32"
    rows_rate = SampleRate(fields=lambda measured: measured, line=lambda m: f"{m['samples_per_sec']:.1f} rows/s")
    code = measure_windows(args, comm, step, lambda loss: float(loss.detach()), lambda: None, base, rate=rows_rate)
    if launched:
        torch_native.shutdown()
        torch_native.leave(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
