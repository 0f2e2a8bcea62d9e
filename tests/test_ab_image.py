"""`bench ab` with an image=NAME side (bench/ab/image_side.py): the container command it builds, bad input refused
before anything runs, a real container placed in the side's CPU group (the base image), and a real session against
the built openmpi cpu image (marker `images`; built first as `make images` builds it)."""
from __future__ import annotations

import json
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from bench.ab import image_side
from bench.ab.cpuquota import CpuGroup, cpu_controller_root, make_group, proc_mounts
from bench.ab.sides import SOURCE_ROOT, ReadySide, side_command
from bench.ab.spec import parse_side
from bench.core.errors import BenchInputError
from bench.images.engines import Engine, find_engine
from tests.conftest import bench_cli
from tests.test_images_built import ENGINE as RUNNING_ENGINE
from tests.test_images_built import WHY_NOT

IMAGE = "bench-pt-tf-openmpi:cpu"
BASE = "localhost/debian:bookworm"  # scripts/debian_base.sh's


def test_an_image_side_runs_bench_in_the_container_with_its_group_and_variables(tmp_path):
    spec = parse_side("B", f"image={IMAGE},cpus=0.5,env.OMP_NUM_THREADS=2")
    assert (spec.image, spec.cpus, spec.env) == (IMAGE, 0.5, {"OMP_NUM_THREADS": "2"})
    assert spec.describe() == f"image {IMAGE}, CPU quota 0.5, OMP_NUM_THREADS=2"
    side = ReadySide(spec, "python", SOURCE_ROOT, group=CpuGroup(Path("/sys/fs/cgroup/cpu/bench-ab-s1-B"), 1),
                     engine=Engine("podman", "/usr/bin/podman"), folder=tmp_path, label="bench-ab-s1-B")
    argv, env = side_command(side, tmp_path / "m.yaml", tmp_path / "pair0-B.db", timeout=300)
    assert argv[0] == "/usr/bin/podman" and "OMP_NUM_THREADS" not in env.get("PYTHONPATH", "")
    run = argv.index("run")
    options, tail = argv[run:argv.index(IMAGE)], argv[argv.index(IMAGE) + 1:]
    assert tail == ["python", "-m", "bench", "run", "/work/matrix.yaml", "--store", "/work/pair0-B.db", "--rerun",
                    "--timeout", "300"]
    pairs = {(a, b) for a, b in zip(options, options[1:])}
    assert {("--cgroup-parent", "/bench-ab-s1-B"), ("--env", "OMP_NUM_THREADS=2"), ("--user", "10001:10001"),
            ("-v", f"{tmp_path}:/work"), ("--name", "bench-ab-s1-B-pair0-B")} <= pairs
    assert "--rm" in options and "--ulimit" in options  # the engine's limits (bench/images/engines.py)
    no_group = ReadySide(parse_side("B", f"image={IMAGE}"), "python", SOURCE_ROOT,
                         engine=Engine("podman", "/usr/bin/podman"), folder=tmp_path)
    assert "--cgroup-parent" not in side_command(no_group, tmp_path / "m.yaml", tmp_path / "s.db", None)[0]


def test_no_container_engine_is_one_line_exit_2_and_nothing_run(tmp_path):
    (tmp_path / "m.yaml").write_text("name: x\naxes: {gpu: [cpu], framework: [pytorch], mpi: [gloo], gpus: [1]}\n")
    r = bench_cli("ab", "m.yaml", "--b", "image=bench:1", "--store", "s.db", cwd=tmp_path,
                  env={"PATH": str(tmp_path)})  # neither podman nor docker on PATH
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "image=bench:1: no container engine" in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.yaml"]


def _engine() -> Engine | None:
    try:
        return find_engine()
    except BenchInputError:
        return None


ENGINE = _engine()
needs_engine = pytest.mark.skipif(ENGINE is None, reason="no container engine (podman or docker) here")
# Building and running the image needs more: an engine that answers (docker's client without its daemon does not).
needs_running_engine = pytest.mark.skipif(RUNNING_ENGINE is None, reason=f"no container engine that runs: {WHY_NOT}")


@needs_engine
def test_an_image_that_is_not_built_is_one_line_exit_2_and_nothing_run(tmp_path):
    (tmp_path / "m.yaml").write_text("name: x\naxes: {gpu: [cpu], framework: [pytorch], mpi: [gloo], gpus: [1]}\n")
    r = bench_cli("ab", "m.yaml", "--b", "image=no-such-image-anywhere:1", "--store", "s.db", cwd=tmp_path)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "image=no-such-image-anywhere:1: no such image" in r.stderr and "make images" in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.yaml"]


def _group_dirs(name: str) -> list[str]:
    return [f"{where}/{name}" for where, fstype, _ in proc_mounts()
            if fstype in ("cgroup", "cgroup2") and Path(where, name).exists()]


@pytest.mark.images
@needs_engine
@pytest.mark.skipif(cpu_controller_root() is None or not (cpu_controller_root()[0] / "cgroup.procs").exists(),
                    reason="needs a cgroup cpu controller")
def test_the_container_lands_in_the_sides_cpu_group_and_the_groups_are_removed(tmp_path):
    if not image_side.image_exists(ENGINE, BASE):
        pytest.skip(f"{BASE} is not here (scripts/debian_base.sh makes it)")
    name = f"bench-ab-t{uuid.uuid4().hex[:8]}-B"
    try:
        group = make_group(name, 0.5)
    except BenchInputError as e:
        pytest.skip(str(e))
    try:
        argv = image_side.container_argv(ENGINE, BASE, name=name, folder=tmp_path, env={"BENCH_AB_T": "1"},
                                         group=group, command=["sh", "-c", "cat /proc/self/cgroup; echo $BENCH_AB_T"])
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        cpu_line = next(line for line in done.stdout.splitlines() if line.split(":")[1] in ("cpu", "cpu,cpuacct", ""))
        assert cpu_line.split(":")[2].startswith(f"/{name}/"), done.stdout  # under the side's group
        assert done.stdout.splitlines()[-1] == "1"
    finally:
        image_side.remove_container_cgroups(group)
        group.remove()
    assert _group_dirs(name) == []


@pytest.mark.images
@needs_engine
@pytest.mark.skipif(cpu_controller_root() is None or not (cpu_controller_root()[0] / "cgroup.procs").exists(),
                    reason="needs a cgroup cpu controller")
def test_a_session_whose_image_has_no_bench_fails_cleanly(tmp_path):
    """Both sides in the base image (no Python there): every side run fails at once, the session says no cell was
    measured (exit 2), and neither containers nor the sides' cgroups are left behind."""
    if not image_side.image_exists(ENGINE, BASE):
        pytest.skip(f"{BASE} is not here (scripts/debian_base.sh makes it)")
    r = bench_cli("ab", str(SOURCE_ROOT / "benchmarks" / "ab-tiny.yaml"), "--a", f"image={BASE},cpus=1",
                  "--b", f"image={BASE}", "--pairs", "3", "--store", "ab.db", "--workdir", "w", cwd=tmp_path)
    assert r.returncode == 2 and "no cell was measured on both sides" in r.stderr, r.stderr
    session = r.stderr.split("ab session ", 1)[1].split(":", 1)[0]
    assert r.stderr.count("recorded nothing") == 6
    assert '"python": executable file not found' in (tmp_path / "w" / "pair0-A.log").read_text()
    assert (tmp_path / "w" / "image-A" / "matrix.yaml").stat().st_uid == 10001  # the image's user writes there
    left = subprocess.run(ENGINE.command("ps", "-a", "--filter", f"name=bench-ab-{session}", "-q"),
                          capture_output=True, text=True, timeout=120).stdout.strip()
    assert left == "" and _group_dirs(f"bench-ab-{session}-A") == [] and _group_dirs(f"bench-ab-{session}-B") == []


@pytest.mark.images
@pytest.mark.e2e
@needs_running_engine
def test_a_session_against_the_built_image(tmp_path):
    """Side B in the openmpi cpu image, side A on the host, 3 pairs of benchmarks/ab-tiny.yaml: every side run
    recorded, B's inside the container (its own hostname), a verdict per cell, no container left."""
    from bench.images import recipes
    from tests.test_images_built import ensure_built

    assert ensure_built(recipes.variant("pt-tf-openmpi-cpu")) == IMAGE  # built or brought up to date, as make images
    started = time.monotonic()
    r = bench_cli("ab", str(SOURCE_ROOT / "benchmarks" / "ab-tiny.yaml"), "--b", f"image={IMAGE}", "--pairs", "3",
                  "--store", "ab.db", "--json", "ab.json", "--workdir", "w", cwd=tmp_path, timeout=1500)
    assert r.returncode in (0, 1), r.stdout + r.stderr[-4000:]
    doc = json.loads((tmp_path / "ab.json").read_text())
    (cell,) = doc["cells"]
    assert cell["pairs"] == 3 and cell["verdict"] in ("unchanged", "improved", "regressed", "undecided"), cell
    from bench.store import Store

    with Store(tmp_path / "ab.db", create=False) as store:
        side_of = {run["run_id"]: json.loads(run["plan_json"])["ab"]["side"] for run in store.runs()}
        hosts = {(side_of[r["run_id"]], json.loads(r["record_json"])["env_probe"].get("hostname"))
                 for r in store.records()}
    assert sorted(side_of.values()) == ["A", "A", "A", "B", "B", "B"]
    a_hosts = {h for s, h in hosts if s == "A"}
    b_hosts = {h for s, h in hosts if s == "B"}
    assert a_hosts and b_hosts and not a_hosts & b_hosts, hosts  # B ran in containers, A on the host
    left = subprocess.run(ENGINE.command("ps", "-a", "--filter", f"name=bench-ab-{doc['session']}", "-q"),
                          capture_output=True, text=True, timeout=120).stdout.strip()
    assert left == ""
    print(f"image A/B session: {time.monotonic() - started:.0f} s; ratio {cell['ratio']:.3f} {cell['verdict']}")


def test_an_image_sides_quota_is_named_from_its_spec():
    """The probe in a container cannot see the side's cgroup quota; `what changed` takes it from the spec."""
    import pandas as pd

    from bench.commands.ab import side_differences

    probe = {"cpu_quota": {"cpus": None, "source": "v1:/"}, "cpu_count": 2}
    df = pd.DataFrame({"run_id": ["a0", "b0"], "record_json": [json.dumps({"status": "ok", "env_probe": probe})] * 2})
    run_side = {"a0": (0, "A"), "b0": (0, "B")}
    specs = [parse_side("A", "current"), parse_side("B", f"image={IMAGE},cpus=0.5")]
    changes = side_differences(df, run_side, [], specs)
    assert [(c.what, c.before, c.after) for c in changes] == [("CPU quota", "none", "0.5 CPUs")]
    assert side_differences(df, run_side, [], [specs[0], parse_side("B", f"image={IMAGE}")]) == []
