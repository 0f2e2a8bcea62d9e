"""The compute probe (bench/analysis/probe.py, bench/backends/local/compute_probe.py) and the verdict of co-located
cells that rests on it (bench/analysis/expected.py): hand-made numbers for the arithmetic, the stale rule and the cache,
and one real probe of two plain PyTorch processes."""
import dataclasses
import json
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from bench.analysis.expected_cells import expected_cells
from bench.analysis.probe import (LOADED_PER_CORE, MAX_AGE_S, ProbeResult, compute_key, fresh, key_text, match,
                                  overlapping, stale_reason, summarize, to_entry)
from bench.backends.local import compute_probe
from bench.launch import analysis_facts
from bench.planning.cell import PlannedCell
from tests.factories import cell

BATCH = 16
ME = {"hostname": "vm", "cores": 2, "kernel": "6.1.0", "bench_version": "0.1.0", "probe_version": 1}


def probe(rate=15.0, compute=1.0, spread=(1.0, 1.03)):
    """Two plain processes at `rate` img/s each (step 16/15 s: compute 1.0 s, update and the rest 0.067 s)."""
    return ProbeResult(workers=2, batch=BATCH, rate=rate, rate_low=rate * 0.98, rate_high=rate * 1.02,
                       step_s=BATCH / rate, compute_s=compute,
                       process_compute_s=tuple(compute * s for s in spread) if compute else (),
                       windows=4, measured_unix=1000.0, identity=ME, other_load=0.1)


def rank(i, compute, comm, update=0.0667, steps=8):
    step = compute + comm + update
    return {"rank": i, "host": "vm", "steps": steps, "window_s": step * steps,
            "phases_s": {"input": 0.0, "compute": compute * steps, "comm_wait": comm * steps,
                         "update": update * steps}}


def table(two_step, one_rate=33.0, **overrides):
    """A 1-worker cell at one_rate and a 2-worker cell whose step is two_step s (rate 2 · 16 / two_step)."""
    two_rate = 2 * BATCH / two_step
    one = {**cell(gpus=1, batch_per_gpu=BATCH, **overrides), "cell_id": "one", "nodes": 1,
           "samples_per_sec": one_rate, "boot_low": one_rate * 0.98, "boot_high": one_rate * 1.02}
    two = {**cell(gpus=2, batch_per_gpu=BATCH, **overrides), "cell_id": "two", "nodes": 1,
           "samples_per_sec": two_rate, "boot_low": two_rate * 0.97, "boot_high": two_rate * 1.03}
    return pd.DataFrame([one, two])


def verdict_of(windows, two_step, earlier=(), p=None, **overrides):
    (e,) = expected_cells(table(two_step, **overrides), ranks={"two": windows}, probes={"two": p or probe()},
                          history={"two": list(earlier)}, flavours=analysis_facts())
    return e


# --- the verdict's arithmetic ---------------------------------------------------------------------------------------

def test_expected_is_n_times_the_probes_rate_and_a_measured_engine_cost_explains_the_gap():
    # Both ranks compute 1.4 s a step where a plain process beside another computes 1.0: Open MPI's threads, 40%.
    windows = [[rank(0, 1.40, 0.05), rank(1, 1.40, 0.05)] for _ in range(5)]
    e = verdict_of(windows, two_step=1.4 + 0.05 + 0.0667)
    assert e.expected == pytest.approx(2 * 15.0) and e.links == "compute probe"
    assert e.gap == pytest.approx(1 - e.measured / 30.0) and e.gap > 0.25  # far under the probe's rate...
    assert not e.below and e.verdict.startswith("as expected")  # ...and all of it measured
    engine = e.split.part("engine")
    assert engine.seconds == pytest.approx(0.40) and engine.unexplained == 0
    assert e.split.part("communication").seconds == pytest.approx(0.05)
    assert e.split.part("node sharing").seconds == pytest.approx(BATCH / 15.0 - BATCH / 33.0)
    text = e.describe()
    assert "Open MPI's threads cost 40% of compute on shared cores (measured)" in text
    assert "node sharing: 2 plain processes compute at 15.0 img/s each, 33.0 alone" in text


@pytest.mark.parametrize("mpi, words", [("intelmpi", "Intel MPI's threads"), ("mpich", "MPICH's threads"),
                                         ("gloo", "Horovod's Gloo threads")])
def test_the_engine_part_is_named_by_the_flavour_that_runs_it(mpi, words):
    # (DDP's wait sits inside backward: its engine part is modelled, not named as measured.)
    windows = [[rank(0, 1.40, 0.05), rank(1, 1.40, 0.05)] for _ in range(5)]
    e = verdict_of(windows, two_step=1.4 + 0.05 + 0.0667, mpi=mpi)
    assert f"{words} cost 40% of compute on shared cores (measured)" in e.describe()


def test_every_registered_flavour_names_its_own_threads():
    from bench.launch import LAUNCHERS

    facts = analysis_facts()
    assert set(facts.threads) == set(LAUNCHERS) and set(facts.stand_in_order) == set(LAUNCHERS)
    for name, flavour in LAUNCHERS.items():
        assert flavour.title in facts.threads_of(name), name


def test_without_a_probe_the_old_rule_holds_and_a_co_located_cell_says_it_had_none():
    windows = [[rank(0, 1.40, 0.05), rank(1, 1.40, 0.05)]]
    (e,) = expected_cells(table(1.52), ranks={"two": windows}, probes={}, flavours=analysis_facts())
    assert e.links == "data sheet" and e.below and "no compute probe" in e.describe()


def test_a_rank_slowed_beyond_the_probes_spread_is_below_expected_and_named():
    # Something beside rank 1: it computes 2.4 s, rank 0 1.4 s and then waits 1.05 s for the allreduce.
    windows = [[rank(0, 1.40, 1.05), rank(1, 2.40, 0.05)] for _ in range(5)]
    e = verdict_of(windows, two_step=2.4 + 0.05 + 0.0667)
    assert e.below, e.describe()
    imbalance = e.split.part("imbalance")
    assert imbalance.seconds == pytest.approx(1.0) and imbalance.unexplained == pytest.approx(0.9)  # 10% allowed
    assert e.split.part("engine").unexplained == 0 and e.split.part("communication").seconds == pytest.approx(0.05)
    assert "unexplained: rank 1 computed 2.400 s a step, 1.000 s more than the fastest rank" in e.verdict
    assert "something beside rank 1" in e.verdict


def test_ranks_as_unequal_as_the_probes_processes_are_not_below_expected():
    windows = [[rank(0, 1.40, 0.12), rank(1, 1.48, 0.05)] for _ in range(5)]
    e = verdict_of(windows, two_step=1.48 + 0.05 + 0.0667)
    assert not e.below and e.split.part("imbalance").unexplained == 0


def test_an_engine_cost_grown_beyond_earlier_runs_of_the_cell_is_below_expected():
    before = [[[rank(0, 1.40, 0.05), rank(1, 1.40, 0.05)] for _ in range(5)] for _ in range(2)]
    # Now both ranks compute 2.0 s (a load on both cores): 100% over the probe where earlier runs measured 40%.
    windows = [[rank(0, 2.00, 0.05), rank(1, 2.00, 0.05)] for _ in range(5)]
    e = verdict_of(windows, two_step=2.0 + 0.05 + 0.0667, earlier=before)
    engine = e.split.part("engine")
    assert engine.reference == pytest.approx(0.40) and engine.unexplained > 0.3
    assert e.below and "compute on shared cores grew to 100% over the compute probe's, where the least of 2 earlier " \
        "runs of this cell measured 40% (Open MPI's threads)" in e.verdict
    # The same cell as measured the first time explains itself: no earlier figure to have grown beyond.
    assert not verdict_of(windows, two_step=2.0 + 0.05 + 0.0667).below


def test_where_compute_and_communication_are_not_timed_apart_the_text_says_so():
    unsplit = [[{"rank": i, "host": "vm", "steps": 8, "window_s": 1.6 * 8, "phases_s": {"input": 0.0, "other": 12.8}}
                for i in (0, 1)] for _ in range(5)]
    e = verdict_of(unsplit, two_step=1.6, p=probe(compute=None), framework="tensorflow", channels_last=True)
    assert not e.below and e.split.modelled and e.verdict.startswith("not measured apart (33% under the probe's rate")
    assert "Horovod's" not in e.describe() and "not measured apart: TensorFlow runs its step as one call" in \
        e.describe() and "modelled, not measured" in e.describe()
    # Grown past earlier runs by more than the tolerance: below expected, and still says it is not measured apart.
    before = [[[{**r, "window_s": 1.6 * 8} for r in w] for w in unsplit]]
    slow = [[{**r, "window_s": 2.4 * 8} for r in w] for w in unsplit]
    e = verdict_of(slow, two_step=2.4, earlier=before, p=probe(compute=None), framework="tensorflow")
    assert e.below and "modelled, not measured apart" in e.verdict
    again = verdict_of(unsplit, two_step=1.6, earlier=before, p=probe(compute=None), framework="tensorflow")
    assert again.verdict.startswith("as expected (33% under the probe's rate, as in earlier runs)")


def test_ddp_waits_inside_backward_so_its_parts_are_not_measured_apart():
    windows = [[{"rank": i, "host": "vm", "steps": 8, "window_s": 1.5 * 8,
                 "phases_s": {"input": 0.0, "compute": 1.4 * 8, "update": 0.1 * 8}} for i in (0, 1)]]
    e = verdict_of(windows, two_step=1.5, engine="native")
    assert e.split.modelled and "DDP waits for the allreduce inside backward" in e.describe()


# --- the probe's own figures ----------------------------------------------------------------------------------------

def window(start, end, rate, compute=1.0, steps=2):
    return {"start_unix": start, "end_unix": end, "samples_per_sec": rate, "measured_steps": steps,
            "per_rank": [{"rank": 0, "steps": steps, "phases_s": {"compute": compute * steps}}]}


def test_only_windows_where_every_process_was_measuring_count():
    a = [window(0, 2, 20.0), window(2, 4, 15.0), window(4, 6, 15.0)]  # a started first, alone for its first window
    b = [window(1.9, 4, 15.0), window(4, 6, 15.0), window(6, 8, 20.0)]  # b ended last, alone for its last
    kept = overlapping([a, b])
    assert [w["start_unix"] for w in kept[0]] == [2, 4] and [w["start_unix"] for w in kept[1]] == [1.9, 4]
    r = summarize([a, b], BATCH)
    assert r.rate == pytest.approx(15.0) and r.windows == 4 and r.compute_s == pytest.approx(1.0)
    assert summarize([a, []], BATCH) is None


# --- stale rule and cache -------------------------------------------------------------------------------------------

def test_a_probe_is_stale_after_seven_days_on_another_machine_kernel_core_count_or_bench_version_or_beside_load():
    entry = {"identity": ME, "measured_unix": 1000.0, "other_load": 0.1}
    assert stale_reason(entry, ME, 1000.0 + MAX_AGE_S - 1) is None
    assert "days old" in stale_reason(entry, ME, 1000.0 + MAX_AGE_S + 1)
    assert "other processes' 1.3 CPU-s/s" in stale_reason({**entry, "other_load": 1.3}, ME, 1001.0)  # 2 cores: 0.5
    assert "not recorded" in stale_reason({**entry, "other_load": None}, ME, 1001.0)
    for key, value in (("hostname", "other"), ("cores", 4), ("kernel", "6.2.0"), ("bench_version", "0.2.0"),
                       ("probe_version", 2)):
        assert key in stale_reason(entry, {**ME, key: value}, 1001.0)


def test_the_newest_fresh_entry_is_reused_and_a_cell_gets_the_probe_measured_before_it():
    c = cell(gpus=2, batch_per_gpu=BATCH)
    key = compute_key(c)
    old, new = to_entry(key, probe(rate=14.0), []), to_entry(key, probe(rate=16.0), [])
    new["measured_unix"] = 5000.0
    other = to_entry(compute_key({**c, "image_size": 32}), probe(rate=40.0), [])
    assert fresh([old, new, other], key, ME, 6000.0)["rate"] == 16.0
    assert fresh([old, new], key, {**ME, "kernel": "x"}, 6000.0) is None
    # The same compute settings under another MPI flavour or engine share the probe; other settings do not.
    assert key_text(compute_key({**c, "mpi": "intelmpi", "engine": "native", "repeats": 9})) == key_text(key)
    assert key_text(compute_key({**c, "threads": 2})) != key_text(key)
    row = {**c, "nodes": 1}
    assert match([old, new], row, "vm", 4000.0).rate == 14.0  # the probe in force when the cell ran
    assert match([old, new], row, "vm", 5030.0).rate == 16.0
    assert match([old, new], row, "other-host", 5030.0) is None
    assert match([old, new], row, "vm", 5000.0 + MAX_AGE_S + 100) is None  # both too old by then
    assert match([old], {**row, "nodes": 2}, "vm", 1000.0) is None  # not co-located: no probe


def test_ensure_reuses_a_fresh_stored_probe_without_starting_a_process(tmp_path, monkeypatch):
    c = cell(gpus=2, batch_per_gpu=BATCH)
    monkeypatch.setattr(compute_probe, "identity", lambda: ME)
    compute_probe.store(compute_probe.cache_path(tmp_path), to_entry(compute_key(c), probe(), []))
    monkeypatch.setattr(compute_probe, "measure", lambda *a, **k: pytest.fail("measured again"))
    out = compute_probe.ensure(PlannedCell(c, "two", "planned"), tmp_path, sys.executable, 1, now=1000.0 + 3600)
    assert out.reused and out.seconds == 0 and out.result.rate == 15.0 and "reused (1.0 h old)" in out.note
    stored = json.loads(compute_probe.cache_path(tmp_path).read_text())
    assert len(stored["entries"]) == 1


@pytest.mark.slow
@pytest.mark.alone
@pytest.mark.workload
def test_a_real_probe_of_two_plain_pytorch_processes(tmp_path):
    c = cell(gpus=2, batch_per_gpu=4, image_size=32, threads=1, channels_last=False, mpi="gloo")
    planned = PlannedCell(c, "probe-test", "planned")
    t0 = time.monotonic()
    out = compute_probe.ensure(planned, tmp_path, sys.executable, threads=1, timeout_s=120)
    assert out.result is not None, out.note
    r = out.result
    assert r.workers == 2 and r.windows >= 2 and r.rate > 0 and r.compute_s > 0 and r.rate_low <= r.rate <= r.rate_high
    assert time.monotonic() - t0 < 120 and not out.reused and r.other_load is not None and r.other_load >= 0
    entry = json.loads(compute_probe.cache_path(tmp_path).read_text())["entries"][0]
    assert entry["identity"] == compute_probe.identity() and len(entry["processes"]) == 2
    again = compute_probe.ensure(planned, tmp_path, sys.executable, threads=1)
    quiet = r.other_load <= LOADED_PER_CORE * compute_probe.identity()["cores"]
    assert again.reused == quiet  # measured beside other load (a busy machine): measured again
    if quiet:
        assert again.result.rate == pytest.approx(r.rate)
    else:
        assert "beside other processes'" in again.note
    assert Path(tmp_path / "probes" / "compute.json").exists()


def test_earlier_runs_and_the_probe_a_cell_ran_with_are_found_from_the_store_frames():
    from bench.analysis.probe import probes_for
    from bench.analysis.windows import earlier_windows

    ok = pd.DataFrame({"cell_id": ["two", "two"], "run_id": ["20261128T0600Z-b", "20261128T0600Z-b"],
                       "start_unix": [5100.0, 5110.0]})
    ranks = [{"cell_id": "two", "run_id": run, "per_rank": [{"rank": 0, "host": "vm", "n": i}]}
             for run, i in (("20261128T0500Z-a", 1), ("20261128T0600Z-b", 2), ("20261128T0700Z-c", 3))]
    assert earlier_windows(ranks, ok) == {"two": [[[{"rank": 0, "host": "vm", "n": 1}]]]}  # not the shown, not later
    c = cell(gpus=2, batch_per_gpu=BATCH)
    entry = to_entry(compute_key(c), probe(), [])
    entry["measured_unix"] = 5000.0
    t = table(1.5)
    found = probes_for(t, ok, {"two": [ranks[1]["per_rank"]]}, [entry])
    assert set(found) == {"two"} and found["two"].rate == 15.0  # the 1-worker cell gets none


def test_what_a_cell_measured_beyond_its_probe_is_kept_and_read_back_for_later_runs_of_its_stack(tmp_path):
    """`make clean` removes the store, not the probes folder: a later run still has the earlier runs' engine cost."""
    from bench.analysis.probe import cost_entry, costs_for

    c = {**cell(gpus=2, batch_per_gpu=BATCH), "nodes": 1}
    p = probe()
    records = [{"samples_per_sec": 2 * BATCH / 1.5167, "end_unix": 2000.0,
                "per_rank": [rank(0, 1.40, 0.05), rank(1, 1.40, 0.05)]} for _ in range(3)]
    entry = cost_entry(c, p, records, "20261128T0500Z-a", ME)
    assert entry["stack"] == "openmpi/horovod" and entry["probe_measured_unix"] == p.measured_unix
    assert entry["parts"]["engine"] == pytest.approx(0.40) and entry["parts"]["communication"] == pytest.approx(0.05)
    path = compute_probe.cache_path(tmp_path)
    compute_probe.store(path, to_entry(compute_key(c), p, []))
    compute_probe.store(path, entry, "costs")
    assert len(compute_probe.load(path)) == 1 and len(compute_probe.read(path)["costs"]) == 1
    t = table(2.0 + 0.05 + 0.0667)
    sites = {"two": ("vm", 3000.0)}
    stored = costs_for(t, {}, [], {"two": p}, compute_probe.read(path)["costs"], sites)
    assert stored == {"two": [entry["parts"]]}
    assert costs_for(t, {}, [{"cell_id": "two", "run_id": "20261128T0500Z-a"}], {"two": p},
                     [entry], sites) == {}  # the store holds that run: read from the store, not twice
    other = dataclasses.replace(p, measured_unix=1500.0)
    assert costs_for(t, {}, [], {"two": other}, [entry], sites) == {}  # measured against another probe: not comparable
    windows = [[rank(0, 2.00, 0.05), rank(1, 2.00, 0.05)] for _ in range(5)]
    (e,) = expected_cells(t, ranks={"two": windows}, probes={"two": p}, history={}, stored=stored,
                          flavours=analysis_facts())
    assert e.below and "where 1 earlier run of this cell measured 40%" in e.verdict


def test_copies_that_never_measured_at_once_are_measured_again_with_twice_the_windows(tmp_path, monkeypatch):
    calls = []

    def measure(planned, python, threads, data_dir, timeout_s, me, repeats=compute_probe.PROBE_REPEATS):
        calls.append(repeats)
        if len(calls) == 1:
            return None, [[window(0, 2, 15.0)], [window(3, 5, 15.0)]], "no window of one process overlapped"
        return dataclasses.replace(probe(), identity=me), [], ""

    monkeypatch.setattr(compute_probe, "measure", measure)
    c = cell(gpus=2, batch_per_gpu=BATCH)
    out = compute_probe.ensure(PlannedCell(c, "two", "planned"), tmp_path, sys.executable, 1)
    assert calls == [compute_probe.PROBE_REPEATS, 2 * compute_probe.PROBE_REPEATS] and out.result is not None


def test_the_local_backend_keeps_a_cells_costs_against_the_probe_it_ran_with(tmp_path, monkeypatch):
    from bench.backends.local.backend import LocalBackend

    c = cell(gpus=2, batch_per_gpu=BATCH, threads=1)
    planned = PlannedCell(c, "two", "planned")
    loaded = dataclasses.replace(probe(), other_load=1.5)  # stale for the next run, still the one this cell ran with
    monkeypatch.setattr(compute_probe, "ensure",
                        lambda *a, **k: compute_probe.ProbeOutcome(loaded, 9.0, False, "measured"))
    from bench.backends.local import engine_probe

    monkeypatch.setattr(engine_probe, "first_or_stored",  # (its own test: tests/test_outside.py's run, the e2e)
                        lambda *a, **k: compute_probe.ProbeOutcome(None, 0.0, True, "engine: reused"))
    backend = LocalBackend(tmp_path, 60)
    assert [o.seconds for o in backend.before_cell(planned)] == [9.0, 0.0]
    backend.after_cell(planned, "20261128T0500Z-a", [{"samples_per_sec": 2 * BATCH / 1.5167, "end_unix": 2000.0,
                                                      "per_rank": [rank(0, 1.40, 0.05), rank(1, 1.40, 0.05)]}])
    (kept,) = compute_probe.read(compute_probe.cache_path(tmp_path))["costs"]
    assert kept["probe_measured_unix"] == loaded.measured_unix and kept["parts"]["engine"] == pytest.approx(0.40)
    backend.probe_compute = False  # `bench run --no-probe`
    assert backend.before_cell(planned) is None
    assert backend.before_cell(PlannedCell(cell(gpus=1), "one", "planned")) is None
