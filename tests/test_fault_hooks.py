"""The workers' test hooks (models/measure/faults.py) in-process: inert with their variables unset, and aimed only at
the rank, cell, step and size named. tests/test_faults.py and tests/test_collectives.py drive them in real runs."""
import pytest

from models.measure.faults import CORRUPT_VAR, FAULT_SAY_VAR, FAULT_VAR, StepFaults, corrupt_sent


def test_unset_variables_inject_nothing(monkeypatch, capsys):
    monkeypatch.delenv(FAULT_VAR, raising=False)
    monkeypatch.delenv(CORRUPT_VAR, raising=False)
    faults = StepFaults.from_env(0, "abc123")
    assert faults.entries == []
    for _ in range(5):
        faults.tick()
    data = [1.0, 2.0, 3.0]
    corrupt_sent(data, 12, 0)
    assert data == [1.0, 2.0, 3.0]
    assert capsys.readouterr() == ("", "")


def test_a_fault_fires_on_its_rank_cell_and_step_only(monkeypatch, capsys):
    monkeypatch.setenv(FAULT_VAR, "say:rank=1:step=3:cell=abc, raise:rank=0:step=2:cell=zzz")
    monkeypatch.setenv(FAULT_SAY_VAR, "hello")
    assert StepFaults.from_env(0, "abc123").entries == []  # raise is for cell zzz…
    assert StepFaults.from_env(1, "zzz999").entries == []  # …and say for rank 1 of cell abc…
    faults = StepFaults.from_env(1, "abc123")
    assert [(kind, step) for kind, step, _ in faults.entries] == [("say", 3)]
    faults.tick()
    faults.tick()
    assert capsys.readouterr().out == ""
    faults.tick()
    out = capsys.readouterr()
    assert out.out == "hello\n" and "bench fault: say at step 3" in out.err


def test_pin_moves_every_thread_of_the_rank_onto_the_named_cpu(monkeypatch):
    import os
    import threading

    monkeypatch.setenv(FAULT_VAR, "pin:rank=0:step=1:cpu=0")
    before = os.sched_getaffinity(0)
    seen = {}
    started, done = threading.Event(), threading.Event()

    def other():  # a thread the worker already has (an intra-op pool, the engine's loop)
        started.set()
        done.wait(10)
        seen["other"] = os.sched_getaffinity(0)

    t = threading.Thread(target=other)
    t.start()
    started.wait(10)
    try:
        StepFaults.from_env(0, None).tick()
        seen["main"] = os.sched_getaffinity(0)
    finally:
        done.set()
        t.join()
        os.sched_setaffinity(0, before)
    assert seen == {"main": {0}, "other": {0}}


def test_slow_stretches_every_step_from_its_own_on_so_throughput_falls_by_the_fraction(monkeypatch):
    import time

    def steps_per_s(faults: StepFaults, n: int = 30) -> float:
        started = time.perf_counter()
        for _ in range(n):
            faults.tick()
            end = time.perf_counter() + 0.01  # a 10 ms step, busy (a sleep would be stretched by the OS alike)
            while time.perf_counter() < end:
                pass
        return n / (time.perf_counter() - started)

    monkeypatch.setenv(FAULT_VAR, "slow:rank=0:step=1:frac=0.2")
    slowed = StepFaults.from_env(0, None)
    monkeypatch.delenv(FAULT_VAR)
    plain = StepFaults.from_env(0, None)
    rates = [(steps_per_s(plain), steps_per_s(slowed)) for _ in range(3)]  # side by side, the best of three each
    ratio = max(r[1] for r in rates) / max(r[0] for r in rates)
    assert 0.74 < ratio < 0.86, rates  # 0.8 planted; the first interval is not yet stretched
    monkeypatch.setenv(FAULT_VAR, "slow:rank=0:step=1:frac=1.5")
    with pytest.raises(SystemExit):
        StepFaults.from_env(0, None).tick()


def test_an_unknown_fault_kind_ends_the_worker_with_one_line(monkeypatch, capsys):
    monkeypatch.setenv(FAULT_VAR, "explode:rank=0")
    with pytest.raises(SystemExit) as ended:
        StepFaults.from_env(0, None)
    assert ended.value.code == 2
    assert "BENCH_FAULT: unknown fault kind 'explode'" in capsys.readouterr().err


def test_corruption_hits_one_element_at_the_named_rank_and_size(monkeypatch):
    monkeypatch.setenv(CORRUPT_VAR, "rank=1:bytes=16:element=2")
    data = [0.0] * 4
    corrupt_sent(data, 16, 0)  # another rank
    corrupt_sent(data, 32, 1)  # another size
    assert data == [0.0] * 4
    corrupt_sent(data, 16, 1)
    assert data == [0.0, 0.0, 1.0, 0.0]
