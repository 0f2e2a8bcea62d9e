"""matrix-llm-layouts.yaml (issue 66): Llama 3 8B and 70B over 16-256 H100s x parallel layouts x IB on/off. The
plan keeps exactly the cells the layout planner says fit an H100 and skips the others with its memory sentence; every
planned cell renders for Slurm, Azure ML and Kubernetes as a job its backend's own rules accept (the sbatch script
run by bash with its options known to sbatch, the Azure ML SDK's loader, the operators' CRDs and Kubernetes' core
schema), started by mpirun over nodes x 8 ranks, with the cell's layout in the worker's argv."""
from __future__ import annotations

import io
import re
import shlex
import shutil
import subprocess
from functools import cache

import pytest
import yaml

from bench.backends import make_backend
from bench.facts.catalog import catalog
from bench.layouts.fabric import fabric_of
from bench.layouts.feasibility import Job
from bench.layouts.memory import usable_bytes
from bench.layouts.planner import Cluster, judge
from bench.layouts.shapes import shape_named
from bench.planning.layout_rules import cell_layout
from bench.planning.matrix import load_matrix
from bench.planning.plan import plan_cells
from tests.conftest import ROOT

MATRIX = ROOT / "matrix-llm-layouts.yaml"
PER_NODE = 8


@cache
def _doc() -> dict:
    return yaml.safe_load(MATRIX.read_text(encoding="utf-8"))


def _planned(backend_name: str, tmp_path):
    matrix = load_matrix(MATRIX)
    backend = make_backend(backend_name, matrix.spec.backend, tmp_path)
    return backend, plan_cells(matrix.cells(), backend)


def _runnable(backend_name: str, tmp_path):
    backend, planned = _planned(backend_name, tmp_path)
    runnable = [p for p in planned if p.runnable]
    assert runnable and all(p.nodes == p.cell["gpus"] // PER_NODE for p in runnable)
    return backend, runnable


def _planner_row(cell: dict, checkpointing: tuple[str, ...] | None = None) -> dict:
    """The layout planner's verdict on a cell (bench model --layouts' path, not the plan's): the cell's layout, its
    global batch (replicas x batch_per_gpu) and its checkpointing (or the first of `checkpointing` that fits) on its
    nodes of 8 H100s."""
    layout = cell_layout(cell)
    sku = catalog()[cell["gpu"]]
    nodes = cell["gpus"] // PER_NODE
    job = Job(seq=cell["seq_len"], global_batch=layout.dp * cell["batch_per_gpu"], gpus_per_node=PER_NODE)
    cluster = Cluster(PER_NODE, nodes, 1.0, usable_bytes(sku.memory_gb),
                      fabric_of(sku.key, PER_NODE, "ib" if cell["ib"] else "tcp"))
    return judge(shape_named(cell["model"]), layout, cluster, job,
                 checkpointing=checkpointing or ("full" if cell["activation_checkpointing"] else "none",))


def _worker_args(argv: list[str]) -> list[str]:
    start = next(i for i, a in enumerate(argv) if a.endswith("transformer/pytorch_worker.py"))
    return argv[start + 1:]


def _flag(args: list[str], name: str) -> str:
    assert args.count(name) == 1, (name, args)
    return args[args.index(name) + 1]


def assert_carries_the_cell(argv: list[str], cell: dict) -> None:
    """The worker's flags say the cell: its layout exactly, its model, its replica's batch and its engine."""
    args = _worker_args(argv)
    assert _flag(args, "--layout") == cell["layout"], args
    assert _flag(args, "--model") == cell["model"] and _flag(args, "--engine") == "fsdp2"
    assert _flag(args, "--batch-size") == str(cell["batch_per_gpu"]) and _flag(args, "--seq-len") == "8192"
    assert ("--activation-checkpointing" if cell["activation_checkpointing"] else "--no-activation-checkpointing") \
        in args


def assert_mpirun_over_the_nodes(argv: list[str], cell: dict, hosts: list[str]) -> None:
    """mpirun starts gpus ranks, 8 on each host in order (--map-by slot: a tp group's ranks share a node)."""
    assert argv[0].endswith("mpirun"), argv[:3]
    assert _flag(argv, "-np") == str(cell["gpus"]) and _flag(argv, "--map-by") == "slot"
    assert _flag(argv, "-H") == ",".join(f"{h}:{PER_NODE}" for h in hosts)


# --- the plan ----------------------------------------------------------------------------------------------------
def test_the_matrix_lists_both_models_at_every_scale_with_the_layout_families():
    doc = _doc()
    cells = load_matrix(MATRIX).cells()
    excluded = len(doc["exclude"]) * len(doc["axes"]["ib"])
    assert len(cells) == len(doc["axes"]["model"]) * len(doc["axes"]["ib"]) * len(doc["axes"]["layout"]) - excluded
    assert {c["model"] for c in cells} == {"llama3-8b", "llama3-70b"}
    families = {}
    for c in cells:
        layout = cell_layout(c)  # the degrees' product is the cell's gpus, or this raises
        family = ("tp x pp" if layout.pp > 1 else "fsdp x tp" if layout.tp > 1 else
                  "hsdp" if layout.dp_replicate > 1 else "fsdp")
        families.setdefault((c["model"], c["gpus"], c["ib"]), set()).add(family)
        assert c["engine"] == "fsdp2" and c["batch_per_gpu"] == 2 * layout.tp * layout.pp, c  # 2 sequences a GPU
    assert {k[1] for k in families} == {16, 64, 256} and len(families) == 2 * 3 * 2
    for (model, _, _), found in families.items():
        assert found == ({"fsdp", "hsdp", "fsdp x tp"} | ({"tp x pp"} if model != "llama3-8b" else set()))


def test_the_plan_keeps_what_the_planner_says_fits_and_skips_the_rest_for_memory(tmp_path):
    _, planned = _planned("slurm", tmp_path)
    verdicts = {p.cell_id: _planner_row(p.cell) for p in planned}
    assert all(not v["refused"] for v in verdicts.values())  # no divisibility or placement refusal: memory only
    fits = [p for p in planned if verdicts[p.cell_id]["fits"]]
    assert [p.cell_id for p in planned if p.runnable] == [p.cell_id for p in fits]
    skipped = [p for p in planned if not p.runnable]
    assert skipped and fits
    usable = usable_bytes(catalog()["H100"].memory_gb) / 2**30
    for p in skipped:  # refused with checkpointing on: nothing the cell could set would fit it
        needs = verdicts[p.cell_id]["memory"]["total_bytes"] / 2**30
        assert p.cell["activation_checkpointing"] and needs > usable
        assert p.reason == f"layout={p.cell['layout']} on H100: needs {needs:.1f} GiB per GPU, {usable:.1f} GiB usable"
    for p in fits:  # checkpointing only where the layout does not fit without it, as the planner chooses
        chosen = _planner_row(p.cell, ("none", "full"))["checkpointing"]
        assert p.cell["activation_checkpointing"] == (chosen == "full"), p.label()
    # The 8B fits every layout; every scale and fabric keeps at least one 70B layout.
    assert all(p.runnable for p in planned if p.cell["model"] == "llama3-8b")
    assert {(p.cell["gpus"], p.cell["ib"]) for p in fits if p.cell["model"] != "llama3-8b"} == \
        {(g, ib) for g in (16, 64, 256) for ib in (True, False)}


# --- Slurm: the sbatch script --------------------------------------------------------------------------------------
@cache
def _sbatch_options() -> frozenset[str] | None:
    """The long options the installed sbatch knows (its --help; no cluster needed), or None without sbatch."""
    if not shutil.which("sbatch"):
        return None
    out = subprocess.run(["sbatch", "--help"], capture_output=True, text=True, timeout=30, check=False).stdout
    return frozenset(re.findall(r"(?<![\w-])--([a-z][a-z-]+)", out)) or None


def sbatch_options(script: str) -> dict[str, str]:
    """The #SBATCH lines as sbatch reads them (shell quoting): option name without dashes -> value ('' for a flag)."""
    out = {}
    for line in script.splitlines():
        if line.startswith("#SBATCH "):
            name, _, value = shlex.split(line)[1].removeprefix("--").partition("=")
            out[name] = value
    return out


def run_script(script: str, hosts: list[str], cwd) -> tuple[list[str], str]:
    """Runs the sbatch script with bash as Slurm would inside the allocation, with `scontrol show hostnames` answering
    the allocation's hosts and the final exec printing its argv (NUL-separated) instead of starting mpirun; returns
    that argv and MASTER_ADDR as the workers would get it."""
    stub = "scontrol() { [ \"$1 $2\" = 'show hostnames' ] && printf '%s\\n' " + " ".join(hosts) + "; }\n"
    body = script.replace("\nset -eu\n", "\nset -eu\n" + stub, 1)
    body = body.replace("\nexec ", "\nprintf '%s\\0' \"$MASTER_ADDR\"; exec printf '%s\\0' ", 1)
    ran = subprocess.run(["bash", "-c", body], capture_output=True, text=True, cwd=cwd, check=False,
                         env={"PATH": "/usr/bin:/bin", "SLURM_JOB_NODELIST": "gpu[001-999]", "SLURM_JOB_ID": "77"})
    assert ran.returncode == 0, ran.stderr
    master, *argv = ran.stdout.split("\0")[:-1]
    return argv, master


def test_slurm_scripts_ask_for_the_nodes_and_start_every_rank_with_its_layout(tmp_path):
    backend, runnable = _runnable("slurm", tmp_path)
    known = _sbatch_options()
    for p in runnable:
        c = p.cell
        script = backend.script(p, "RUN")
        options = sbatch_options(script)
        assert {k: options[k] for k in ("nodes", "ntasks", "ntasks-per-node", "gpus-per-node", "cpus-per-task")} == \
            {"nodes": str(p.nodes), "ntasks": str(c["gpus"]), "ntasks-per-node": "8", "gpus-per-node": "8",
             "cpus-per-task": "12"}, p.label()
        assert "exclusive" in options and options["partition"] == "gpu"
        if known is not None:
            assert set(options) <= known, sorted(set(options) - known)
        hosts = [f"gpu{i:03d}" for i in range(1, p.nodes + 1)]
        argv, master = run_script(script, hosts, tmp_path)
        assert master == hosts[0]
        assert_mpirun_over_the_nodes(argv, c, hosts)
        assert_carries_the_cell(argv, c)
        assert f"export NCCL_IB_DISABLE={0 if c['ib'] else 1}" in script
        assert ("--mca pml ucx" in script) == c["ib"]


def test_the_slurm_checks_fail_on_a_script_that_drops_or_mangles_the_layout(tmp_path):
    backend, runnable = _runnable("slurm", tmp_path)
    p = next(p for p in runnable if cell_layout(p.cell).pp > 1)
    script = backend.script(p, "RUN")
    layout = p.cell["layout"]
    hosts = [f"gpu{i:03d}" for i in range(1, p.nodes + 1)]
    for broken in (script.replace(f" --layout {layout}", ""), script.replace(layout, layout.replace(",", " ", 1)),
                   script.replace(f"-np {p.cell['gpus']}", "-np 8")):
        argv, _ = run_script(broken, hosts, tmp_path)
        with pytest.raises(AssertionError):
            assert_mpirun_over_the_nodes(argv, p.cell, hosts)
            assert_carries_the_cell(argv, p.cell)


# --- Azure ML: the SDK's own job -----------------------------------------------------------------------------------
@pytest.mark.slow
def test_azure_ml_jobs_load_in_the_sdk_with_mpi_over_the_nodes_and_the_layout(tmp_path, monkeypatch):
    from azure.ai.ml import load_job

    for var in ("AZUREML_SUBSCRIPTION_ID", "AZUREML_RESOURCE_GROUP", "AZUREML_WORKSPACE"):
        monkeypatch.delenv(var, raising=False)
    backend, runnable = _runnable("azureml", tmp_path)
    for p in runnable:
        c = p.cell
        text = backend.job_yaml(p, "RUN1")
        job = load_job(io.StringIO(text))  # the SDK's schema: raises on a job it would not submit
        assert job.compute == "nd-h100-v5" and job.resources.instance_count == p.nodes
        assert job.distribution.type == "mpi" and job.distribution.process_count_per_instance == PER_NODE
        env = job.environment_variables
        assert env["NCCL_IB_DISABLE"] == ("0" if c["ib"] else "1")
        assert env["OMPI_MCA_rmaps_base_mapping_policy"] == "slot"  # a tp group's ranks on one node
        assert_carries_the_cell(shlex.split(job.command.split(" && ")[-1]), c)
    from marshmallow import ValidationError

    with pytest.raises(ValidationError, match="instance_count"):  # the loader is the check: it refuses a bad job
        load_job(io.StringIO(text.replace(f"instance_count: {p.nodes}", "instance_count: eight")))


# --- Kubernetes: the operators' CRDs and the core schema -------------------------------------------------------------
def test_kubernetes_mpijobs_are_valid_and_start_every_rank_with_its_layout(tmp_path):
    pytest.importorskip("kubernetes_validate", reason="the core schema comes with kubernetes-validate (.[kubernetes])")
    from bench.backends.kubernetes import schema as kubernetes_schema

    backend, runnable = _runnable("kubernetes", tmp_path)
    for p in runnable:
        c = p.cell
        manifest = backend.maker.manifest(p, "RUN_ID")
        assert manifest["kind"] == "MPIJob" and kubernetes_schema.problems(manifest) == [], p.label()
        specs = manifest["spec"]["mpiReplicaSpecs"]
        worker = specs["Worker"]["template"]["spec"]["containers"][0]
        assert specs["Worker"]["replicas"] == p.nodes and manifest["spec"]["slotsPerWorker"] == PER_NODE
        limits = worker["resources"]["limits"]
        assert limits["nvidia.com/gpu"] == PER_NODE and ("rdma/rdma_shared_device_a" in limits) == c["ib"]
        launcher = specs["Launcher"]["template"]["spec"]["containers"][0]
        name, ns = manifest["metadata"]["name"], manifest["metadata"]["namespace"]
        hosts = [f"{name}-worker-{i}.{name}.{ns}.svc" for i in range(p.nodes)]
        assert_mpirun_over_the_nodes(launcher["command"], c, hosts)
        assert_carries_the_cell(launcher["command"], c)
        assert {"name": "MASTER_ADDR", "value": hosts[0]} in launcher["env"]
    bad = backend.maker.manifest(runnable[0], "RUN_ID")
    bad["spec"]["slotsPerWorker"] = "eight"
    assert kubernetes_schema.problems(bad)
