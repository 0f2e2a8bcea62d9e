"""models/probes/node_probe.py, the hosts backend's node check, run as the real program it is on every host."""
import json
import subprocess
import sys

import bench
from bench.backends.hosts.nodes import MARKER, PROBE, probe
from tests.conftest import ROOT

KEYS = {"host", "python", "bench", "models", "horovod", "cores", "gpus", "marker", "iface"}


def run_probe(*args: str) -> dict:
    done = subprocess.run([sys.executable, str(ROOT / "models" / "probes" / "node_probe.py"), *args],
                          capture_output=True, text=True, timeout=60, cwd="/")
    assert done.returncode == 0, done.stderr
    [line] = done.stdout.splitlines()
    return json.loads(line)


def test_the_probe_prints_one_json_object_with_every_fact(tmp_path):
    (tmp_path / MARKER).write_text("token-1")
    facts = run_probe(str(tmp_path / MARKER), "lo")
    assert set(facts) == KEYS
    assert facts["bench"] == bench.__version__  # read from bench/__init__.py as a file: models/ imports no bench
    assert facts["python"] == sys.version.split()[0] and facts["marker"] == "token-1" and facts["iface"] is True
    assert facts["cores"] >= 1 and facts["gpus"] >= 0 and len(facts["models"]) == 16


def test_the_probe_reports_what_is_missing(tmp_path):
    facts = run_probe(str(tmp_path / "no-marker"), "no-such-nic0")
    assert facts["marker"] is None and facts["iface"] is False
    assert run_probe(str(tmp_path / "no-marker"), "")["iface"] is True  # no interface asked about


def test_the_digest_follows_the_workload_code(tmp_path):
    first = run_probe(str(tmp_path / MARKER), "")["models"]
    assert run_probe(str(tmp_path / MARKER), "")["models"] == first
    from models.probes.node_probe import models_digest

    copy = tmp_path / "models"
    for p in (ROOT / "models").rglob("*.py"):
        (copy / p.relative_to(ROOT / "models")).parent.mkdir(parents=True, exist_ok=True)
        (copy / p.relative_to(ROOT / "models")).write_bytes(p.read_bytes())
    assert models_digest(copy) == first
    changed = copy / "workloads" / "resnet50" / "model_torch.py"
    changed.write_text(changed.read_text() + "\n# changed\n")
    assert models_digest(copy) != first
    changed.rename(copy / "workloads" / "model_torch.py")  # the same file in another folder is another tree
    assert models_digest(copy) != first


def test_the_backend_runs_the_probe_file_and_reads_its_facts(tmp_path):
    assert PROBE == ROOT / "models" / "probes" / "node_probe.py"
    (tmp_path / MARKER).write_text("m")
    facts = probe(sys.executable, tmp_path / MARKER, "lo", None)
    assert isinstance(facts, dict) and set(facts) == KEYS and facts["marker"] == "m"
    assert probe("/nonexistent/python", tmp_path / MARKER, "", None).startswith("could not run its check (")
