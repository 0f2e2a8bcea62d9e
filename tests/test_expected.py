"""bench/analysis/expected.py and expected_cells.py: the expected value of a cell from its series' 1-worker rate, the
verdict with its interval, the straggler from per-rank compute times, and the step's breakdown (pure functions, real
model)."""
import pandas as pd
import pytest

from bench.analysis.breakdown import breakdown
from bench.analysis.collectives import fit_alpha_beta
from bench.analysis.expected import TOLERANCE, verdict
from bench.analysis.expected_cells import expected_cells
from bench.analysis.straggler import straggler
from bench.analysis.whatif import predict
from bench.analysis.windows import windows_of
from bench.launch import analysis_facts
from tests.factories import cell


def table(two_rate, two_ci=(0.97, 1.03), one_rate=20.0, **overrides):
    one = {**cell(gpus=1, **overrides), "cell_id": "one", "nodes": 1, "samples_per_sec": one_rate,
           "boot_low": one_rate * 0.98, "boot_high": one_rate * 1.02}
    two = {**cell(gpus=2, **overrides), "cell_id": "two", "nodes": 1, "samples_per_sec": two_rate,
           "boot_low": two_rate * two_ci[0], "boot_high": two_rate * two_ci[1]}
    return pd.DataFrame([one, two])


def ranks(compute_per_step, steps=4, comm=0.01):
    return [{"rank": i, "host": f"h{i}", "steps": steps,
             "phases_s": {"input": 0.0, "compute": c * steps, "comm_wait": comm * steps, "update": 0.01 * steps}}
            for i, c in enumerate(compute_per_step)]


def test_expected_is_n_times_the_one_worker_rate_less_the_exposed_allreduce():
    t = table(two_rate=3800.0, one_rate=2000.0)  # a fast worker: the allreduce is not all hidden
    (e,) = expected_cells(t, flavours=analysis_facts())
    p = predict("cpu", 2, 2000.0, int(t.loc[1, "batch_per_gpu"]), fabric="tcp")
    assert e.expected == pytest.approx(p.samples_per_sec) and p.exposed_s > 0 and e.expected < 4000.0
    assert e.links == "data sheet" and e.expected_low < e.expected < e.expected_high
    assert e.verdict == "as expected"


def test_a_cell_far_under_its_expected_value_is_below_expected_with_the_gap_and_its_interval():
    (e,) = expected_cells(table(two_rate=20.0), flavours=analysis_facts())
    assert e.below and e.gap == pytest.approx(1 - 20.0 / e.expected)
    assert e.gap_low < e.gap < e.gap_high
    assert e.verdict.startswith(f"below expected by {100 * e.gap:.0f}%")


def test_the_tolerance_and_the_intervals_decide_the_verdict():
    # Just inside the tolerance below the expected interval's bottom: as expected; just past it: below.
    assert verdict(90, 85, 100 * (1 - TOLERANCE) * 0.999, 100, 100, 100)[0].startswith("below")
    assert verdict(90, 85, 100 * (1 - TOLERANCE) * 1.001, 100, 100, 100)[0] == "as expected"
    assert verdict(130, 125, 135, 100, 95, 105)[0].startswith("above expected by 30%")


def test_a_cell_without_a_one_worker_cell_in_its_series_has_no_expected_value_and_says_why():
    t = table(two_rate=30.0)
    t.loc[0, "batch_per_gpu"] = 999  # another series now
    (e,) = expected_cells(t, flavours=analysis_facts())
    assert e.expected is None and "no 1-worker cell" in e.why


def test_a_measured_fit_of_the_stack_replaces_the_data_sheet():
    t = table(two_rate=30.0)
    r = t.iloc[1]
    rows = [{"bytes": b, "time_median_s": 1e-3 + b / 1e7, "world_size": 2} for b in (1e5, 1e6, 1e7, 1e8)]
    stack = tuple(bool(r[k]) if k == "ib" else r[k] for k in ("gpu", "mpi", "ib", "engine", "nodes"))
    (e,) = expected_cells(t, {stack: fit_alpha_beta(rows, stack)}, flavours=analysis_facts())
    assert e.links == "measured fit"
    (sheet,) = expected_cells(t, flavours=analysis_facts())
    assert e.expected < sheet.expected  # 10 MB/s is slower than the data sheet's shared-memory link


def test_the_rank_with_the_longest_compute_is_named_only_when_it_is_much_slower():
    slow = straggler([ranks([0.10, 0.21]), ranks([0.11, 0.20])])
    assert slow is not None and slow.rank == 1 and slow.host == "h1" and slow.ratio == pytest.approx(0.105 / 0.205)
    assert straggler([ranks([0.10, 0.11, 0.105, 0.10])]) is None
    assert straggler([[{"rank": 0, "host": "h", "steps": 4}, {"rank": 1, "host": "h", "steps": 4}]]) is None


def test_the_breakdown_is_measured_where_the_worker_split_its_step_and_modelled_where_not():
    row = table(two_rate=30.0).iloc[1].to_dict()
    b = breakdown(row, [ranks([0.2, 0.2], comm=0.05)])
    assert b.sources["compute"] == "measured" and b.parts["compute"] == pytest.approx(0.2)
    assert b.parts["communication"] == pytest.approx(0.05) and b.step_s == pytest.approx(0.26)
    unsplit = [[{"rank": i, "host": "h", "steps": 4, "phases_s": {"input": 0.04, "other": 1.2}} for i in (0, 1)]]
    m = breakdown(row, unsplit, x1=row["batch_per_gpu"] / 0.2, exposed_s=0.03)
    assert m.sources["compute"] == "modelled" and m.parts["compute"] == pytest.approx(0.2)
    assert m.parts["communication"] == 0.03 and m.parts["rest"] == pytest.approx(0.31 - 0.01 - 0.2 - 0.03)
    assert breakdown(row, [[{"rank": 0, "host": "h", "steps": 4}]]) is None


def test_windows_are_taken_from_the_run_the_table_shows():
    ok = pd.DataFrame({"cell_id": ["a"], "run_id": ["r2"]})
    got = windows_of([{"cell_id": "a", "run_id": "r1", "per_rank": [1]},
                      {"cell_id": "a", "run_id": "r2", "per_rank": [2]}], ok)
    assert got == {"a": [[2]]}
