"""Speedup and efficiency arithmetic, and which baseline it names."""
import pandas as pd
import pytest

from bench.analysis.scaling import cell_summary, imported_mask, latest_complete, scaling
from bench.backends import BACKENDS
from bench.records.schema import parse_record
from bench.store import Store
from tests.factories import record


def summary_of(rates: dict[int, list[float]], **cell):
    rows = []
    for gpus, values in rates.items():
        for i, v in enumerate(values):
            rows.append({"cell_id": f"c{gpus}", "gpu": "V100", "framework": "pytorch", "mpi": "openmpi", "ib": False,
                         "gpus": gpus, "model": "resnet50", "engine": "horovod", "data": "synthetic",
                         "data_layout": "jpeg", "loader_workers": 0, "batch_per_gpu": 64,
                         "image_size": 224, "precision": "fp32", "warmup_steps": 10, "steps": 50, "repeats": 3,
                         "jobs": 1, "channels_last": True, "threads": None, "workers_per_node": None,
                         "max_message_bytes": None,
                         "loader": "auto", "compile": "off", "optimizer_impl": "default", "cuda_graphs": False,
                         "seq_len": None, "grad_accum": 1, "activation_checkpointing": False,
                         "layout": None, "tp_across_nodes": False, "nodes": 1,
                         "samples_per_sec": v,
                         "job": 0, "slowest_rank": 0, "rank_spread": 0.0, **cell})
    return cell_summary(pd.DataFrame(rows))


def test_efficiency_against_the_one_worker_median():
    table = scaling(summary_of({1: [100, 90, 110], 2: [180, 170, 190], 4: [300, 320, 310]})).set_index("gpus")
    assert table.loc[1, "samples_per_sec"] == 100
    assert table.loc[2, "speedup"] == pytest.approx(1.8)
    assert table.loc[2, "efficiency"] == pytest.approx(0.9)
    assert table.loc[4, "efficiency"] == pytest.approx(310 / (4 * 100))
    assert set(table["baseline_gpus"]) == {1}


def test_without_a_one_worker_cell_the_smallest_run_is_the_named_baseline():
    table = scaling(summary_of({4: [400], 8: [720], 32: [2560]})).set_index("gpus")
    assert set(table["baseline_gpus"]) == {4}
    assert table.loc[8, "efficiency"] == pytest.approx(720 / (2 * 400))
    assert table.loc[32, "efficiency"] == pytest.approx(2560 / (8 * 400))


def test_series_are_kept_apart():
    a = summary_of({1: [100], 2: [150]})
    b = summary_of({1: [50], 2: [100]}, mpi="gloo")
    b["cell_id"] = b["cell_id"] + "g"
    table = scaling(pd.concat([a, b], ignore_index=True))
    eff = {(r.mpi, r.gpus): r.efficiency for r in table.itertuples()}
    assert eff[("openmpi", 2)] == pytest.approx(0.75) and eff[("gloo", 2)] == pytest.approx(1.0)


def test_report_uses_the_latest_complete_run_of_each_cell(tmp_path):
    with Store(tmp_path / "b.db") as store:
        for run, scale in (("old", 1.0), ("new", 2.0)):
            store.write_many(parse_record(record(run_id=run, repeat=i, repeats=2, rate_scale=scale))
                             for i in range(2))
        # A later run that failed must not hide the good one.
        store.write(parse_record({**record(run_id="zlater", repeat=0, repeats=2), "status": "failed",
                                  "error": "boom"}))
        df = store.dataframe()
    df.loc[df.run_id == "old", "start_unix"] = 1.0
    df.loc[df.run_id == "new", "start_unix"] = 2.0
    ok = latest_complete(df)
    assert set(ok["run_id"]) == {"new"}
    assert cell_summary(ok)["samples_per_sec"].iloc[0] == pytest.approx(64 / 1.0)


def test_interval_is_over_job_medians_when_a_cell_ran_several_jobs():
    rows = summary_of({1: [100.0]}).iloc[0].to_dict()
    df = pd.DataFrame([{**rows, "job": j, "samples_per_sec": v, "slowest_rank": 0, "rank_spread": 0.0}
                       for j, v in ((0, 100), (0, 102), (1, 90), (1, 92), (2, 110), (2, 111))])
    out = cell_summary(df.drop(columns=["n", "min", "max", "ci_low", "ci_high", "ci_coverage", "ci_over",
                                        "samples_per_sec_per_gpu"])).iloc[0]
    assert out.ci_over == "3 jobs" and out.n == 6
    assert (out.ci_low, out.ci_high) == (91.0, 110.5)  # min and max of the job medians 101, 91, 110.5


def test_a_source_naming_any_backend_is_a_measurement():
    sources = [*BACKENDS, "bench", "", "Goyal et al. 2017"]
    records = pd.DataFrame({"run_id": ["r1"] * len(sources), "source": sources})
    assert imported_mask(records).tolist() == [False] * (len(sources) - 1) + [True]
