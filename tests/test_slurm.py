"""The slurm backend against a real single-node Slurm (scripts/slurm_local.sh starts it): sbatch scripts, real jobs
under mpirun / horovodrun / srun, resume, failures, submit errors, Ctrl-C and timeouts that leave no job behind."""
import json
import os
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest

from bench.backend_settings.slurm import SlurmConfig
from bench.backends.slurm import SlurmBackend
from bench.core.errors import BenchInputError
from bench.planning.matrix import load_matrix_text
from bench.planning.plan import plan_cells
from tests.conftest import ROOT, TINY_WORKLOAD, bench_cli

pytestmark = pytest.mark.e2e

# Would create PWNED files if any layer ran it instead of passing it on; '%j' would be expanded by a careless sbatch.
HOSTILE = "x'y; touch PWNED3; $(touch PWNED) `touch PWNED2` %j"


@pytest.fixture(scope="session")
def slurm():
    """A running single-node Slurm; SLURM_CONF set for this process and the bench processes it starts."""
    if not shutil.which("sbatch") or not shutil.which("munged"):
        pytest.skip("Slurm is not installed (Debian: apt-get install slurm-wlm munge)")
    if os.geteuid() != 0:
        pytest.skip("starting a local Slurm needs root (slurmd starts jobs as their users)")
    started = subprocess.run(["bash", str(ROOT / "scripts" / "slurm_local.sh")], capture_output=True, text=True,
                             timeout=120, check=False)
    # Installed but not starting is a bug in the script, not a reason to skip.
    assert started.returncode == 0 and not started.stdout, started.stderr
    conf = os.environ.get("BENCH_SLURM_DIR", "/var/lib/bench-slurm") + "/slurm.conf"
    previous = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = conf
    yield conf
    if previous is None:
        os.environ.pop("SLURM_CONF", None)
    else:
        os.environ["SLURM_CONF"] = previous


def matrix(axes: str, backend: str = "", **workload) -> str:
    extra = "".join(f"  {k}: {v}\n" for k, v in workload.items())
    return f"name: slurm\n{TINY_WORKLOAD}{extra}axes:\n{axes}backend:\n  name: slurm\n{backend}"


def planned_cells(text: str, backend: SlurmBackend):
    return plan_cells(load_matrix_text(text).cells(), backend)


def read_records(store: Path) -> pd.DataFrame:
    with sqlite3.connect(store) as conn:
        return pd.read_sql("SELECT * FROM records", conn)


def bench_jobs(cell_ids) -> list[str]:
    """Slurm jobs (any state squeue lists: pending, running, completing) of these cells."""
    out = subprocess.run(["squeue", "-h", "-o", "%j"], capture_output=True, text=True, check=True).stdout
    names = {f"bench-{c}" for c in cell_ids}
    return [n for n in out.split() if n in names]


def workers_of(path_part: str) -> list[int]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            cmd = p.info["cmdline"] or []
        except psutil.Error:
            continue
        if any("resnet50/pytorch_worker.py" in a for a in cmd) and any(path_part in a for a in cmd):
            found.append(p.pid)
    return found


# --- the sbatch script (pure: no cluster needed) ----------------------------------------------------------------------
def test_a_multi_node_gpu_cell_asks_for_whole_nodes_and_gpus(tmp_path):
    backend = SlurmBackend(SlurmConfig(partition="gpu", account="ml-infra", cores_per_node=96, gpus_per_node=8),
                           tmp_path, timeout_s=600)
    [cell] = planned_cells(matrix("  gpu: [H100]\n  mpi: [openmpi]\n  ib: [true]\n  gpus: [16]\n"), backend)
    assert cell.runnable, cell.reason
    script = backend.script(cell, "R1")
    options = [shlex.split(line)[1] for line in script.splitlines() if line.startswith("#SBATCH ")]
    assert options[:6] == [f"--job-name=bench-{cell.cell_id}", "--nodes=2", "--ntasks=16", "--ntasks-per-node=8",
                           "--cpus-per-task=12", "--gpus-per-node=8"]
    assert {"--time=11", "--partition=gpu", "--account=ml-infra", "--exclusive"} <= set(options)
    job_dir = tmp_path.resolve() / "runs" / "R1" / cell.cell_id / "job0"
    assert f"--output={job_dir}/log.txt" in options and f"--chdir={job_dir}" in options
    # Hosts come from the allocation, 8 slots each.
    assert 'BENCH_NODES=($(scontrol show hostnames "$SLURM_JOB_NODELIST"))' in script
    assert '"${BENCH_NODES[0]}:8,${BENCH_NODES[1]}:8"' in script
    described = backend.describe(cell, "R1")
    assert described["sbatch"] == script and described["argv"] == ["sbatch", "--parsable", f"{job_dir}/job.sbatch"]


def test_cpu_cells_get_no_gpus_and_srun_replaces_mpirun_but_not_horovodrun(tmp_path):
    backend = SlurmBackend(SlurmConfig(launch="srun", srun_mpi="pmi2", cores_per_node=8, gpus_per_node=0),
                           tmp_path, timeout_s=60)
    cells = planned_cells(matrix("  gpu: [cpu]\n  mpi: [openmpi, gloo]\n  gpus: [4]\n"), backend)
    by_mpi = {c.cell["mpi"]: c for c in cells}
    for c in cells:
        script = backend.script(c, "R1")
        assert "--gpus-per-node" not in script and "#SBATCH --cpus-per-task=2" in script
        assert "#SBATCH --ntasks=4" in script and "#SBATCH --nodes=1" in script
    srun = backend.render(by_mpi["openmpi"], "R1").argv
    assert srun[:6] == ("srun", "--mpi=pmi2", "--ntasks=4", "--ntasks-per-node=4", "--cpus-per-task=2",
                        "--kill-on-bad-exit=1")
    assert Path(backend.render(by_mpi["gloo"], "R1").argv[0]).name == "horovodrun"


def test_the_interface_reaches_multi_node_launch_lines_and_srun_only(tmp_path):
    backend = SlurmBackend(SlurmConfig(iface="ib0", cores_per_node=8, gpus_per_node=8), tmp_path, timeout_s=60)
    cells = planned_cells(matrix("  gpu: [H100]\n  mpi: [openmpi, mpich]\n  gpus: [8, 16]\n"), backend)
    by = {(c.cell["mpi"], c.cell["gpus"]): c for c in cells}
    mpirun = backend.script(by[("openmpi", 16)], "R1")
    assert "--mca btl_tcp_if_include ib0 --mca oob_tcp_if_include ib0" in mpirun
    assert "export NCCL_SOCKET_IFNAME=ib0" in mpirun
    assert "-iface ib0" in backend.script(by[("mpich", 16)], "R1")
    # One node: no interface anywhere, the launchers keep shared memory.
    assert "ib0" not in backend.script(by[("openmpi", 8)], "R1")
    # srun takes no launcher flags: Open MPI's settings go as its variables.
    srun = SlurmBackend(SlurmConfig(launch="srun", iface="eth1", cores_per_node=8, gpus_per_node=0), tmp_path,
                        timeout_s=60)
    [cell] = planned_cells(matrix("  gpu: [cpu]\n  mpi: [openmpi]\n  gpus: [2]\n  workers_per_node: [1]\n"), srun)
    script = srun.script(cell, "R1")
    assert srun.render(cell, "R1").argv[0] == "srun" and "mpirun" not in script
    assert "export OMPI_MCA_btl_tcp_if_include=eth1" in script and "export OMPI_MCA_oob_tcp_if_include=eth1" in script


def test_a_cidr_interface_skips_the_multi_node_cells_whose_layers_need_a_name(tmp_path):
    backend = SlurmBackend(SlurmConfig(iface="10.0.0.0/24", cores_per_node=8, gpus_per_node=0), tmp_path,
                           timeout_s=60)
    cells = planned_cells(matrix("  gpu: [cpu]\n  mpi: [openmpi, mpich]\n  gpus: [1, 2]\n"
                                 "  workers_per_node: [1]\n"), backend)
    reasons = {(c.cell["mpi"], c.cell["gpus"]): c.reason for c in cells}
    assert reasons[("openmpi", 2)] is None and reasons[("openmpi", 1)] is None and reasons[("mpich", 1)] is None
    assert reasons[("mpich", 2)].startswith("iface '10.0.0.0/24' is a network (CIDR); ")


def test_reach_rules_name_nodes_cores_and_gpus(tmp_path):
    backend = SlurmBackend(SlurmConfig(max_nodes=2, cores_per_node=2, gpus_per_node=0), tmp_path, timeout_s=60)
    cells = planned_cells(matrix("  gpu: [cpu, H100]\n  mpi: [openmpi]\n  gpus: [2, 4, 24]\n"), backend)
    reasons = {(c.cell["gpu"], c.cell["gpus"]): c.reason for c in cells}
    assert reasons[("cpu", 2)] is None
    assert reasons[("cpu", 4)] == "4 CPU workers per node would oversubscribe the Slurm nodes' 2 cores"
    assert reasons[("H100", 2)].endswith("the Slurm partition has none (sinfo shows no gpu GRES)")
    assert reasons[("H100", 24)] == "needs 3 nodes; backend.slurm.max_nodes is 2"
    gpu_backend = SlurmBackend(SlurmConfig(gpus_per_node=4), tmp_path, timeout_s=60)
    [h100] = planned_cells(matrix("  gpu: [H100]\n  mpi: [openmpi]\n  gpus: [8]\n"), gpu_backend)
    assert h100.reason == "H100 cell needs 8 GPUs per node; the Slurm partition's nodes have 4"


def test_hostile_values_reach_the_workers_only_quoted(tmp_path):
    hostile = HOSTILE
    backend = SlurmBackend(SlurmConfig(cores_per_node=2, gpus_per_node=0, shared_dir=str(tmp_path / hostile)),
                           tmp_path, timeout_s=60, imagenet_dir=str(tmp_path / hostile / "data"))
    [cell] = planned_cells(matrix("  gpu: [cpu]\n  mpi: [openmpi]\n  gpus: [1]\n", data="imagenet"), backend)
    script = backend.script(cell, "R1")
    argv = backend.render(cell, "R1").argv
    assert any(hostile in a for a in argv)
    # bash itself runs the script (the launcher swapped for printf): every argument arrives exactly as rendered
    # and nothing in the hostile value was executed.
    body = script.replace("\nexec ", "\nexec printf '%s\\0' ")
    ran = subprocess.run(["bash", "-c", body], capture_output=True, text=True, cwd=tmp_path, check=False)
    assert ran.returncode == 0, ran.stderr
    assert tuple(ran.stdout.split("\0")[:-1]) == argv
    assert not list(tmp_path.rglob("PWNED*"))
    # sbatch reads the #SBATCH lines with the same quoting rules.
    options = [shlex.split(line)[1] for line in script.splitlines() if line.startswith("#SBATCH ")]
    out = next(o for o in options if o.startswith("--output="))
    assert out == f"--output={tmp_path / hostile.replace('%', '%%')}/runs/R1/{cell.cell_id}/job0/log.txt"
    # Names in #SBATCH lines are checked by the schema instead: a line break there would end the comment.
    with pytest.raises(BenchInputError, match="partition"):
        load_matrix_text(matrix("  gpu: [cpu]\n", backend="  slurm:\n    partition: \"x\\nrm -rf /\"\n"))


# --- a real cluster --------------------------------------------------------------------------------------------------
def test_multi_node_hosts_expand_from_the_allocation(slurm, tmp_path):
    backend = SlurmBackend(SlurmConfig(gpus_per_node=8), tmp_path, timeout_s=60)
    [cell] = planned_cells(matrix("  gpu: [A100]\n  mpi: [gloo]\n  gpus: [16]\n"), backend)
    body = backend.script(cell, "R1").replace("\nexec ", "\nexec printf '%s\\0' ")
    ran = subprocess.run(["bash", "-c", body], capture_output=True, text=True,
                         env={**os.environ, "SLURM_JOB_NODELIST": "gpu[07-08]"}, check=False)
    argv = ran.stdout.split("\0")
    assert argv[argv.index("-H") + 1] == "gpu07:8,gpu08:8", ran.stderr


@pytest.fixture(scope="module")
def measured(slurm):
    """One real run: 1- and 2-worker cpu cells under horovodrun (Gloo) and mpirun (Open MPI), in a directory whose
    name would run commands if any layer (sbatch, bash, the launchers) did not quote it."""
    base = Path(tempfile.mkdtemp(prefix="bench-slurm-"))
    d = base / HOSTILE
    d.mkdir()
    (d / "m.yaml").write_text(matrix("  gpu: [cpu, V100]\n  mpi: [gloo, openmpi]\n  gpus: [1, 2]\n"))
    started = time.monotonic()
    first = bench_cli("run", "m.yaml", "--store", "out/bench.db", cwd=d, timeout=300)
    yield d, first, time.monotonic() - started
    shutil.rmtree(base, ignore_errors=True)


def test_real_jobs_land_ok_records_with_the_plans_cell_ids(measured):
    d, first, _ = measured
    assert first.returncode == 0, first.stderr[-3000:]
    assert "4 runnable on slurm, 4 skipped" in first.stderr and "partition has none" in first.stderr
    plan = json.loads(bench_cli("plan", "m.yaml", "--format", "json", cwd=d).stdout)
    df = read_records(d / "out" / "bench.db")
    assert len(df) == 4 * 2 and set(df.status) == {"ok"}
    assert set(df.cell_id) == {r["cell_id"] for r in plan if r["status"] == "planned"}
    assert sorted(df.groupby(["mpi", "gpus"]).size().index) == [("gloo", 1), ("gloo", 2), ("openmpi", 1),
                                                               ("openmpi", 2)]
    for row in df.itertuples():
        rec = json.loads(row.record_json)
        assert rec["world_size"] == row.gpus and sum(r["samples"] for r in rec["per_rank"]) == row.gpus * 4 * 2
        assert Path(rec["command"][0]).name == {"gloo": "horovodrun", "openmpi": "mpirun"}[row.mpi]
        job_dir = d / "out" / "runs" / row.run_id / row.cell_id / "job0"
        assert (job_dir / "log.txt").stat().st_size > 0  # sbatch took the quoted path literally, '%j' included
        assert f"#SBATCH --job-name=bench-{row.cell_id}" in (job_dir / "job.sbatch").read_text()
    assert not list(d.parent.rglob("PWNED*")), "a hostile directory name was executed"
    assert not bench_jobs(df.cell_id)


def test_second_run_resumes_and_submits_nothing(measured):
    d, _, _ = measured
    before = read_records(d / "out" / "bench.db")
    again = bench_cli("run", "m.yaml", "--store", "out/bench.db", cwd=d)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "4 cell(s) already measured" in again.stderr
    after = read_records(d / "out" / "bench.db")
    assert len(after) == len(before) and set(after.run_id) == set(before.run_id)
    assert len(list((d / "out" / "runs").iterdir())) == 1  # no job directory for a second run


def test_failures_and_submit_errors_are_recorded_and_the_other_cells_run(slurm, tmp_path):
    # The cluster's nodes have 2 cores; claiming 64 lets a 4-worker cell past planning so that sbatch rejects it.
    text = matrix("  gpu: [cpu]\n  mpi: [gloo, openmpi]\n  gpus: [1]\n",
                  backend="  slurm:\n    cores_per_node: 64\n    cpus_per_task: 1\n")
    text = text.replace("  gpus: [1]\n", "  gpus: [1]\ninclude:\n  - {gpu: cpu, mpi: gloo, gpus: 4}\n")
    (tmp_path / "m.yaml").write_text(text)
    # A broken Open MPI configuration (inherited by the job through sbatch) fails MPI_Init in the openmpi cell's
    # worker; the Gloo cell does not initialise MPI.
    result = bench_cli("run", "m.yaml", cwd=tmp_path, env={"OMPI_MCA_coll": "no_such_component"})
    assert result.returncode == 1, result.stderr[-2000:]
    df = read_records(tmp_path / "results" / "bench.db")
    rows = {(r.mpi, r.gpus): r for r in df.itertuples() if r.status != "ok"}
    assert set(df[df.status == "ok"].mpi) == {"gloo"} and len(df[df.status == "ok"]) == 2
    assert rows[("openmpi", 1)].status == "failed"
    assert rows[("openmpi", 1)].error.startswith("Slurm job ") and " FAILED, exit code " in rows[("openmpi", 1)].error
    assert json.loads(rows[("openmpi", 1)].record_json)["log_tail"]
    rejected = rows[("gloo", 4)]
    assert rejected.status == "failed"
    assert rejected.error == "sbatch failed: sbatch: error: Batch job submission failed: More processors " \
                             "requested than permitted"


def test_srun_starts_mpi_workers_through_pmix(slurm, tmp_path):
    (tmp_path / "m.yaml").write_text(matrix("  gpu: [cpu]\n  mpi: [openmpi]\n  gpus: [2]\n",
                                            backend="  slurm:\n    launch: srun\n"))
    result = bench_cli("run", "m.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    df = read_records(tmp_path / "results" / "bench.db")
    assert list(df.status) == ["ok", "ok"] and set(df.world_size) == {2}
    rec = json.loads(df.record_json.iloc[0])
    assert rec["command"][:2] == ["srun", "--mpi=pmix"] and rec["env_probe"]["horovod_controller"] == "mpi"


def test_ctrl_c_cancels_the_job_and_the_next_run_resumes(slurm, tmp_path):
    # A quick cell first, then one that would run for minutes.
    text = matrix("  gpu: [cpu]\n  mpi: [openmpi]\n  gpus: [1]\n  steps: [2, 100000]\n")
    (tmp_path / "m.yaml").write_text(text)
    cells = [r["cell_id"] for r in json.loads(bench_cli("plan", "m.yaml", "--format", "json", cwd=tmp_path).stdout)]
    proc = subprocess.Popen([sys.executable, "-m", "bench", "run", "m.yaml"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(1200):  # until the long cell's worker runs
            if workers_of(cells[1]):
                break
            assert proc.poll() is None, proc.communicate()[1][-2000:]
            time.sleep(0.1)
        else:
            pytest.fail("the long cell never started")
        assert bench_jobs(cells[1:])
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=150)
    finally:
        if proc.poll() is None:  # never leave a run behind, whatever failed above
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=150)
        leftover = bench_jobs(cells)
        subprocess.run(["scancel", "--name", f"bench-{cells[1]}"], capture_output=True, check=False)
    assert proc.returncode == 130, err[-2000:]
    df = read_records(tmp_path / "results" / "bench.db")
    assert list(df[df.cell_id == cells[0]].status) == ["ok", "ok"]
    assert list(df[df.cell_id == cells[1]].status) == ["interrupted"]
    assert "was cancelled" in df[df.cell_id == cells[1]].error.iloc[0]
    assert not leftover, "the Slurm job outlived the interrupted run"
    assert not workers_of(str(tmp_path))

    # The next run keeps the measured cell and submits the interrupted one again; its timeout cancels it.
    again = bench_cli("run", "m.yaml", "--timeout", "3", cwd=tmp_path, timeout=150)
    assert again.returncode == 1, again.stderr[-2000:]
    assert "1 cell(s) already measured" in again.stderr
    df = read_records(tmp_path / "results" / "bench.db")
    latest = df[df.cell_id == cells[1]].sort_values("run_id").iloc[-1]
    assert latest.status == "timeout" and latest.error.startswith("timed out after 3 s; Slurm job ")
    assert not bench_jobs(cells) and not workers_of(str(tmp_path))


def test_an_unreachable_cluster_is_bad_input_before_anything_runs(slurm, tmp_path):
    (tmp_path / "broken.conf").write_text("")
    (tmp_path / "m.yaml").write_text(matrix("  gpu: [cpu]\n  mpi: [gloo]\n  gpus: [1]\n"))
    result = bench_cli("run", "m.yaml", cwd=tmp_path, env={"SLURM_CONF": str(tmp_path / "broken.conf")})
    assert result.returncode == 2
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("bench: error: slurm backend: the cluster does not answer: "), result.stderr
    assert not (tmp_path / "results" / "runs").exists()



def test_a_stale_pid_file_naming_another_process_does_not_pass_for_slurmd(slurm):
    """Pid files outlive a machine's restart and their pids get reused: one CI run found slurmd.pid naming an unrelated
    live process, took it for slurmd, never started one, and the node stayed 'unknown*'. The script must check the
    name behind the pid, start the real slurmd, and leave the other process alone."""
    pid_file = Path(os.environ.get("BENCH_SLURM_DIR", "/var/lib/bench-slurm")) / "slurmd.pid"
    slurmd = psutil.Process(int(pid_file.read_text()))
    assert slurmd.name() == "slurmd"
    slurmd.terminate()
    slurmd.wait(timeout=30)
    bystander = subprocess.Popen(["sleep", "120"])
    try:
        pid_file.write_text(f"{bystander.pid}\n")
        started = subprocess.run(["bash", str(ROOT / "scripts" / "slurm_local.sh")], capture_output=True, text=True,
                                 timeout=120, check=False)
        assert started.returncode == 0, started.stderr
        restarted = psutil.Process(int(pid_file.read_text()))
        assert restarted.name() == "slurmd" and restarted.pid != bystander.pid
        assert bystander.poll() is None, "the script signalled a process that is not its daemon"
    finally:
        bystander.kill()
        bystander.wait()
    # The node serves jobs again: a short job runs to the end.
    ran = subprocess.run(["srun", "-N1", "-n1", "-t", "1", "true"], capture_output=True, text=True, timeout=120,
                         check=False)
    assert ran.returncode == 0, ran.stderr


LAYOUT_CELLS = ("name: slurm-layouts\n"
                "workload: {model: tiny, seq_len: 32, batch_per_gpu: 4, warmup_steps: 1, steps: 2, repeats: 2, "
                "threads: 1}\n"
                "axes: {gpu: [cpu], mpi: [gloo], gpus: [2], engine: [fsdp2], "
                "layout: ['tp=2', 'pp=2,schedule=1f1b,m=2']}\n"
                "backend:\n  name: slurm\n")


def test_layout_cells_run_as_slurm_jobs_and_record_each_dimensions_collectives(slurm, tmp_path):
    """Parallel layouts on Slurm (docs/layouts.md): a tensor-parallel cell and a 2-stage 1F1B pipeline cell of `tiny`,
    each a real sbatch job whose launcher starts the layout worker with its `--layout`; both land ok with the
    layout's own figures (its dimension's collectives timed, the pipeline's stages), over Gloo's TCP."""
    (tmp_path / "m.yaml").write_text(LAYOUT_CELLS)
    run = bench_cli("run", "m.yaml", "--no-probe", cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    df = read_records(tmp_path / "results" / "bench.db")
    assert set(df.status) == {"ok"}, df.error.tolist()
    assert sorted(df.groupby("layout").size().items()) == [("pp=2,schedule=1f1b,m=2", 2), ("tp=2", 2)]
    for row in df.itertuples():
        record = json.loads(row.record_json)
        layout = record["layout"]
        dimension = row.layout.split("=")[0]
        assert record["world_size"] == 2 and record["tokens_per_sec"] > 0, record
        assert layout["collective_s_per_step"][dimension] > 0, layout
        script = (tmp_path / "results" / "runs" / row.run_id / row.cell_id / "job0" / "job.sbatch").read_text()
        assert f"--layout {row.layout}" in script or f"--layout '{row.layout}'" in script, script[-1500:]
        assert row.effective_transport == "tcp", row.transport_evidence
    pipeline = json.loads(df[df.layout.str.startswith("pp")].record_json.iloc[0])["layout"]
    assert [stage["stages"] for stage in pipeline["pipeline_by_rank"]] == [[0], [1]]
    assert not bench_jobs(df.cell_id)
