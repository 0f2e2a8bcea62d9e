"""Every fact about an MPI flavour lives in its flavour (bench/launch/<name>.py): a flavour defined in a test package
and registered in one place (the LAUNCHERS registry) reaches the expected value's words, the stand-in choice, a
Kubernetes MPIJob and a Slurm script with its own facts — no KeyError, and no default it did not choose. A fact
moved back into a table keyed by flavour name (in analysis, a backend, or anywhere else) fails here."""
from __future__ import annotations

import pandas as pd
import pytest

from bench.analysis.expected_cells import expected_cells
from bench.backend_settings.container import ContainerSettings
from bench.backend_settings.slurm import SlurmConfig
from bench.launch import LAUNCHERS, analysis_facts
from bench.planning.cell import PlannedCell, cell_id
from tests.factories import cell
from tests.flavours.fakempi import FLAVOUR as FAKE


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setitem(LAUNCHERS, FAKE.name, FAKE)  # the one registration
    return FAKE


def _planned(**over) -> PlannedCell:
    c = cell(**over)
    return PlannedCell(c, cell_id(c), "planned", nodes=1)


def test_the_step_split_names_the_flavours_own_threads(registered):
    from tests.test_compute_probe import rank, verdict_of

    windows = [[rank(0, 1.40, 0.05), rank(1, 1.40, 0.05)] for _ in range(5)]
    e = verdict_of(windows, two_step=1.4 + 0.05 + 0.0667, mpi=FAKE.name)
    assert "Fake MPI's progress threads cost 40% of compute on shared cores (measured)" in e.describe()


def _one_worker(cell_name: str, mpi: str, gpus: int, rate: float) -> dict:
    return {**cell(mpi=mpi, gpus=gpus), "cell_id": cell_name, "nodes": 1, "samples_per_sec": rate,
            "boot_low": rate * 0.98, "boot_high": rate * 1.02}


def test_the_stand_in_choice_follows_the_flavours_own_rank(registered, monkeypatch):
    rows = pd.DataFrame([_one_worker("ompi1", "openmpi", 1, 20.0), _one_worker("fake1", FAKE.name, 1, 21.0),
                         _one_worker("mpich2", "mpich", 2, 30.0)])
    (e,) = expected_cells(rows, flavours=analysis_facts())
    assert e.baseline_id == "fake1" and e.stand_in == "the fakempi 1-worker cell"  # rank -1: before Open MPI
    monkeypatch.setattr(type(FAKE), "stand_in_rank", 99)
    (e,) = expected_cells(rows, flavours=analysis_facts())
    assert e.baseline_id == "ompi1"


def test_a_kubernetes_mpijob_takes_the_flavours_own_mpi_implementation(registered, tmp_path):
    pytest.importorskip("kubernetes_validate", reason="the core schema comes with kubernetes-validate (.[kubernetes])")
    from bench.backend_settings.kubernetes import KubernetesConfig
    from bench.backends.kubernetes.backend import KubernetesBackend

    backend = KubernetesBackend(KubernetesConfig(image_registry="registry.example/bench"), tmp_path, 600)
    manifest = backend.manifest(_planned(mpi=FAKE.name, gpus=2), "RUN_ID")  # checked against the operator's CRD
    assert manifest["kind"] == "MPIJob" and manifest["spec"]["mpiImplementation"] == "MPICH"
    assert backend.manifest(_planned(mpi="openmpi", gpus=2), "RUN_ID")["spec"]["mpiImplementation"] == "OpenMPI"


def test_slurm_asks_the_flavour_whether_srun_can_start_its_ranks(registered, tmp_path):
    from bench.backends.slurm import SlurmBackend

    pyxis = SlurmBackend(SlurmConfig(launch="srun", cores_per_node=8, gpus_per_node=0,
                                     container=ContainerSettings(image="bench-pt-tf-openmpi:cpu", engine="pyxis")),
                         tmp_path, timeout_s=60)
    fake, ompi = _planned(mpi=FAKE.name, gpus=2), _planned(mpi="openmpi", gpus=2)
    assert "pyxis needs srun to start every rank" in pyxis.reach_reason(fake.cell, 1)
    assert pyxis.reach_reason(ompi.cell, 1) is None
    launcher = SlurmBackend(SlurmConfig(cores_per_node=8, gpus_per_node=0), tmp_path, timeout_s=60)
    assert launcher.reach_reason(fake.cell, 1) is None
    script = launcher.script(fake, "R1")
    assert "mpirun -np 2" in script and f"--cell-id {fake.cell_id}" in script


# Where a registered flavour's name may still be spelt outside bench/launch/, and why it is not a flavour fact there.
NAMED_ELSEWHERE = {
    "bench/facts/reference.py": "the published 2018 runs name the MPI each ran (data, not a rule)",
    "bench/planning/matrix.py": "the default cell's flavour when a matrix names none",
    "bench/execution/doctor.py": "Horovod's controller names (mpi, gloo) and built-in checks, not flavours",
}


def test_no_module_outside_the_flavours_names_one():
    """docs/extending.md's count for a new flavour (its module and its registry line) holds only while nothing
    else under bench/ keys a rule by a flavour's name."""
    import re

    from tests.conftest import ROOT

    names = "|".join(re.escape(n) for n in LAUNCHERS)
    spelt = re.compile(rf"""["']({names})["']""")
    found = {}
    for path in sorted((ROOT / "bench").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("bench/launch/"):
            continue
        hits = [i + 1 for i, line in enumerate(path.read_text(encoding="utf-8").splitlines()) if spelt.search(line)]
        if hits:
            found[rel] = hits
    assert set(found) <= set(NAMED_ELSEWHERE), {k: v for k, v in found.items() if k not in NAMED_ELSEWHERE}
    assert set(NAMED_ELSEWHERE) <= set(found), f"stale: {sorted(set(NAMED_ELSEWHERE) - set(found))}"
