"""CPU features in what ran: the probe (models/probes/cpufeatures.py, models/probes/envprobe.py), the report's CPU line,
and `bench check` on a bf16 cell measured on machines whose features differ."""
import json
import re
from pathlib import Path

import pandas as pd
import pytest

from bench.analysis.regress import mark_cpu_differences
from bench.checks.baseline import load_baseline
from bench.records.schema import parse_record
from bench.report.environments import environments
from bench.store import Store
from models.probes.cpufeatures import SPEED_FLAGS, cpu_line, cpu_probe, differences, parse_cpuinfo, signature
from tests.conftest import bench_cli
from tests.factories import record

FIXTURES = Path(__file__).parent / "data" / "cpuinfo"  # constructed excerpts, see its README.md
AMX = parse_cpuinfo((FIXTURES / "amx.txt").read_text())
NO_AMX = parse_cpuinfo((FIXTURES / "no-amx.txt").read_text())


def test_the_probe_reads_this_machine():
    text = Path("/proc/cpuinfo").read_text()
    first = text.split("\n\n")[0]

    def field(name):
        return re.search(rf"^{name}\s*:\s*(.*)$", first, re.M).group(1).strip()

    cpu = cpu_probe()
    assert cpu["vendor"] == field("vendor_id") and cpu["model_name"] == field("model name")
    assert (cpu["family"], cpu["model"], cpu["stepping"]) == tuple(
        int(field(n)) for n in ("cpu family", "model", "stepping"))
    assert cpu["microcode"] == field("microcode")
    flags = set(field("flags").split())
    assert set(cpu["features"]) == set(SPEED_FLAGS)
    assert {f for f, on in cpu["features"].items() if on} == flags & set(SPEED_FLAGS)


def test_the_torch_probe_records_what_torch_dispatches_to():
    import torch

    from models.probes.envprobe import probe_torch

    env = probe_torch(None)
    assert env["cpu"] == cpu_probe()
    assert env["torch_cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    # torch's own detection agrees with the kernel's flags on the flags both name (no VM hides one from the other)
    seen = env["torch_cpu_features"]
    assert seen and all(seen[f] == env["cpu"]["features"][f] for f in seen)


def test_parser_on_a_machine_with_amx_and_one_without():
    assert (AMX["vendor"], AMX["family"], AMX["model"], AMX["stepping"], AMX["microcode"]) == \
        ("GenuineIntel", 6, 143, 8, "0x2b000590")
    assert AMX["model_name"] == NO_AMX["model_name"] == "Intel(R) Xeon(R) Processor"  # the name cannot tell them apart
    assert all(AMX["features"].values())
    assert (NO_AMX["model"], NO_AMX["stepping"]) == (85, 11)
    assert {f for f, on in NO_AMX["features"].items() if not on} == \
        {"amx_tile", "amx_bf16", "amx_int8", "avx512_fp16", "avx_vnni"}
    assert differences(signature(AMX["features"]), signature(NO_AMX["features"])) == \
        ["baseline has amx_tile, amx_bf16, amx_int8, avx512_fp16, avx_vnni, candidate lacks them"]
    assert differences(signature(NO_AMX["features"]), signature({**AMX["features"], "avx_vnni": False})) == \
        ["candidate has amx_tile, amx_bf16, amx_int8, avx512_fp16, baseline lacks them"]
    assert differences("+amx_bf16 -avx512f", "-amx_bf16 +avx512f +amx_tile") == \
        ["baseline has amx_bf16, candidate lacks it", "candidate has avx512f, baseline lacks it"]
    assert differences(signature(AMX["features"]), signature(AMX["features"])) == []
    assert "model 143 stepping 8" in cpu_line(AMX) and "AMX: yes, AVX-512 BF16: yes" in cpu_line(AMX)
    assert "AMX: no, AVX-512 BF16: yes, AVX-512 FP16: no" in cpu_line(NO_AMX)
    assert parse_cpuinfo("") is None
    assert parse_cpuinfo("processor : 0\nFeatures : fp asimd\n")["features"] is None  # no x86 flags line


def _env_record(cpu, rate_scale=1.0, **cell):
    data = record(rate_scale=rate_scale, **cell)
    return {**data, "env_probe": {"hostname": "h", "cpu_model": cpu["model_name"], "cpu_count": 4, "cpu": cpu,
                                  "torch_cpu_capability": "AVX512"}}


def test_the_report_shows_a_cpu_line_per_machine():
    rows = environments([json.dumps(_env_record(AMX)), json.dumps(_env_record(NO_AMX)),
                         json.dumps(_env_record(NO_AMX, precision="bf16"))])
    cpus = sorted(r["cpu"] for r in rows)
    assert len(cpus) == 2
    assert "4 × Intel(R) Xeon(R) Processor (GenuineIntel family 6 model 143 stepping 8, microcode 0x2b000590); " \
           "AMX: yes, AVX-512 BF16: yes" in cpus[0] and cpus[0].endswith("torch kernels: AVX512")
    assert "model 85 stepping 11" in cpus[1] and "AMX: no" in cpus[1]
    old = environments([json.dumps({"env_probe": {"cpu_model": "Some CPU", "cpu_count": 2}})])
    assert old[0]["cpu"] == "2 × Some CPU"  # a record from before the CPU probe


def test_mark_cpu_differences_on_synthetic_sides():
    result = pd.DataFrame([{"cell_id": c, "gpu": "cpu", "precision": p, "n_baseline": 5, "n_candidate": 5,
                            "verdict": "regressed", "note": ""} for c, p in (("a", "bf16"), ("b", "fp32"))])

    def side(sig):
        return pd.DataFrame({"cell_id": ["a", "b"], "status": "ok", "cpu_features": [sig, sig]})

    amx, plain = signature(AMX["features"]), signature(NO_AMX["features"])
    out = mark_cpu_differences(result, side(amx), side(plain)).set_index("cell_id")
    assert out.loc["a", "verdict"] == "incomparable" and out.loc["b", "verdict"] == "regressed"
    assert out.loc["a", "note"] == \
        "CPU features differ: baseline has amx_tile, amx_bf16, amx_int8, avx512_fp16, avx_vnni, candidate lacks them"
    assert out.loc["b", "note"] == out.loc["a", "note"]
    same = mark_cpu_differences(result, side(amx), side(amx))
    assert list(same["verdict"]) == ["regressed"] * 2 and list(same["note"]) == ["", ""]
    unknown = mark_cpu_differences(result, side(None), side(amx)).set_index("cell_id")
    assert unknown.loc["a", "note"] == "CPU features not recorded in the baseline" and unknown.loc["b", "note"] == ""
    assert list(unknown["verdict"]) == ["regressed"] * 2


def _store_run(store, run_id, cpu, scales):
    store.begin_run(run_id, matrix_name="t", matrix_path="m.yaml", backend="local", host="h", bench_version="0",
                    plan={})
    for precision, scale in scales.items():
        for job in range(4):
            for repeat in range(2):
                data = _env_record(cpu, rate_scale=scale * (1 + 0.01 * job + 0.002 * repeat), precision=precision,
                                   jobs=4)
                store.write(parse_record({**data, "run_id": run_id, "repeat": repeat, "job": job}))
    store.finish_run(run_id)


@pytest.mark.slow
def test_check_says_when_a_bf16_cell_ran_on_different_cpu_features(tmp_path):
    with Store(tmp_path / "results" / "bench.db") as store:
        _store_run(store, "amx", AMX, {"bf16": 2.5, "fp32": 1.0})
        _store_run(store, "noamx", NO_AMX, {"bf16": 0.9, "fp32": 0.7})
    saved = bench_cli("baseline", "save", "amx", "--run", "amx", cwd=tmp_path)
    assert saved.returncode == 0, saved.stderr
    doc = load_baseline(tmp_path / "baselines" / "amx.json")
    assert {j["cpu_features"] for c in doc["cells"] for j in c["jobs"]} == {signature(AMX["features"])}

    r = bench_cli("check", "--baseline", "amx", "--candidate", "run:noamx", "--all", cwd=tmp_path)
    out = " ".join(r.stdout.split())
    assert r.returncode == 1, r.stdout + r.stderr  # the fp32 cell regressed; the bf16 one is not called so
    assert "1 regressed" in out and "1 incomparable" in out
    assert "CPU features differ: baseline has amx_tile, amx_bf16, amx_int8, avx512_fp16, avx_vnni, candidate " \
           "lacks them" in out

    # A baseline saved before the probe read CPU flags still loads; the bf16 cell is then compared, and noted.
    for cell in doc["cells"]:
        for job in cell["jobs"]:
            del job["cpu_features"]
    (tmp_path / "old.json").write_text(json.dumps(doc))
    r = bench_cli("check", "--baseline", "old.json", "--candidate", "run:noamx", "--all", cwd=tmp_path)
    out = " ".join(r.stdout.split())
    assert r.returncode == 1 and "2 regressed" in out and "0 incomparable" in out
    assert "CPU features not recorded in the baseline" in out
