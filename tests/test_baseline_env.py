"""A baseline file records its runs' environment (format 2), so `bench check` against a saved baseline says what
changed in the candidate run; a format 1 file (no environment) still checks. Records carry this machine's real
worker probe (models/probes/envprobe.base_probe); the candidate's differs in one field."""
import copy
import json

import pytest

from bench.records.schema import parse_record
from bench.store import Store
from models.probes.envprobe import base_probe
from tests.conftest import bench_cli
from tests.factories import record


def _store_run(store: Store, run_id: str, probe: dict) -> None:
    store.begin_run(run_id, matrix_name="t", matrix_path="m.yaml", backend="local", host="h", bench_version="0",
                    plan={})
    for job in range(3):
        for repeat in range(3):
            data = record(run_id=run_id, repeat=repeat, rate_scale=1 + 0.003 * job + 0.001 * repeat, jobs=3)
            store.write(parse_record({**data, "job": job, "env_probe": probe}))
    store.finish_run(run_id)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A store with a base run and a candidate whose torch differs, and baseline `main` saved from the base run."""
    d = tmp_path_factory.mktemp("baseline-env")
    probe = base_probe()
    probe["packages"] = {**probe.get("packages", {}), "torch": "2.13.0+cpu"}
    newer = copy.deepcopy(probe)
    newer["packages"]["torch"] = "2.14.0+cpu"
    with Store(d / "results" / "bench.db") as store:
        _store_run(store, "base", probe)
        _store_run(store, "cand", newer)
    r = bench_cli("baseline", "save", "main", "--run", "base", cwd=d)
    assert r.returncode == 0, r.stderr
    return d, probe


def test_the_saved_baseline_records_the_environment(saved):
    d, probe = saved
    doc = json.loads((d / "baselines" / "main.json").read_text())
    assert doc["format_version"] == 2
    env = doc["environment"]
    assert env["package torch"] == "2.13.0+cpu" and env["bench version"] == "0"
    assert env["cores (cpu_count)"] == str(probe["cpu_count"]) and env["CPU affinity"] == probe["cpu_affinity"]


@pytest.mark.slow
def test_check_against_the_file_names_the_changed_field_first(saved):
    d, _ = saved
    r = bench_cli("check", "--baseline", "main", "--candidate", "cand", cwd=d)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    head = lines.index("what changed from the baseline to the candidate (most likely to move throughput first):")
    assert lines[head + 1] == "  package torch: 2.13.0+cpu → 2.14.0+cpu"
    assert lines[head + 2].startswith("check: ")  # nothing else differs
    same = bench_cli("check", "--baseline", "main", "--candidate", "base", cwd=d)
    assert "what changed: nothing recorded differs" in same.stdout


def test_a_format_1_baseline_without_environment_still_checks(saved):
    d, _ = saved
    doc = json.loads((d / "baselines" / "main.json").read_text())
    del doc["environment"]
    doc["format_version"] = 1
    (d / "baselines" / "old.json").write_text(json.dumps(doc))
    r = bench_cli("check", "--baseline", "old", "--candidate", "cand", cwd=d)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "what changed: not known (a baseline file saved before format 2" in r.stdout
    assert r.stdout.splitlines()[-1].startswith("check: 1 cells: 0 regressed, 0 improved, 1 unchanged")


def test_a_malformed_environment_is_a_corrupt_baseline(saved):
    d, _ = saved
    doc = json.loads((d / "baselines" / "main.json").read_text())
    doc["environment"] = {"package torch": 2}
    (d / "baselines" / "bad.json").write_text(json.dumps(doc))
    r = bench_cli("check", "--baseline", "bad", "--candidate", "cand", cwd=d)
    assert r.returncode == 2 and "'environment' must be an object of text values" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
