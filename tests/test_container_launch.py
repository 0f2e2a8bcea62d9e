"""The `container:` setting: on the hosts backend each rank's program is the worker inside the image (a wrapper that
runs `podman run` with the node's namespaces, the launcher's variables and the shared folders; or `apptainer exec`),
with the image's Python and models/; on Slurm it renders pyxis' srun options or `apptainer exec`. The wrapper runs
for real here with a stand-in engine on PATH that prints what it was asked to run."""
from __future__ import annotations

import os
import subprocess

import pytest
from pydantic import ValidationError

from bench.backend_settings.hosts import HostsConfig
from bench.backend_settings.slurm import SlurmConfig
from bench.backends.hosts.backend import HostsBackend
from bench.backends.slurm import SlurmBackend
from bench.launch import LAUNCHERS
from bench.planning.matrix import load_matrix_text
from bench.planning.plan import plan_cells
from tests.conftest import TINY_WORKLOAD

IMAGE = "bench-pt-tf-openmpi:cpu"
CELLS = f"name: c\n{TINY_WORKLOAD}  workers_per_node: 1\naxes: {{gpu: [cpu], gpus: [2], mpi: [openmpi, gloo]}}\n"


def hosts_backend(tmp_path, engine="podman") -> HostsBackend:
    config = HostsConfig.model_validate({"hosts": ["node1", "node2"], "iface": "eth1", "workdir": str(tmp_path),
                                         "container": {"image": IMAGE, "engine": engine}})
    return HostsBackend(config, tmp_path, 60)


def planned(text, backend):
    return {p.cell["mpi"]: p for p in plan_cells(load_matrix_text(text).cells(), backend)}


@pytest.mark.parametrize("mpi", ["openmpi", "gloo"])
def test_hosts_ranks_run_the_worker_in_the_image(tmp_path, mpi):
    b = hosts_backend(tmp_path)
    p = planned(CELLS, b)[mpi]
    launch = b.launch(p, "R1")
    wrapper = launch.dir / "container.sh"
    program = launch.spec.program
    assert program[:3] == (str(wrapper), "/opt/bench/.venv/bin/python",
                           "/opt/bench/models/workloads/resnet50/pytorch_worker.py")
    argv = launch.render().argv
    assert str(wrapper) in argv  # the launcher (outside) starts the wrapper as each rank's program
    assert os.path.basename(argv[0]) == os.path.basename(LAUNCHERS[mpi].tool_path(launch.runtime) or argv[0])


def test_the_wrapper_passes_the_launchers_variables_by_name_and_mounts_the_workdir(tmp_path):
    b = hosts_backend(tmp_path)
    p = planned(CELLS, b)["openmpi"]
    launch = b.launch(p, "R1")
    b._write_wrapper(launch.dir / "container.sh", list(launch.spec.env))
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "podman").write_text("#!/bin/sh\nprintf '%s\\n' \"$@\"\n")
    (fake / "podman").chmod(0o755)
    env = {"PATH": f"{fake}:/usr/bin:/bin", "OMPI_COMM_WORLD_RANK": "1", "PMIX_RANK": "1",
           "HOROVOD_RANK": "1", "OMP_NUM_THREADS": "1", "LD_LIBRARY_PATH": "/host/lib", "SECRET_TOKEN": "x"}
    out = subprocess.run([str(launch.dir / "container.sh"), "python", "w.py"], env=env, cwd=tmp_path,
                         capture_output=True, text=True, check=True).stdout.split("\n")
    for name in ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "HOROVOD_RANK", "OMP_NUM_THREADS"):
        assert out[out.index(name) - 1] == "-e", name
    assert "LD_LIBRARY_PATH" not in out and "SECRET_TOKEN" not in out  # the image's own, and nothing unasked
    for flag in ("--network", "--ipc", "--pid", "--uts"):
        assert out[out.index(flag) + 1] == "host"
    assert f"{tmp_path}:{tmp_path}" in out and "/tmp:/tmp" in out
    assert out[out.index(IMAGE) + 1:out.index(IMAGE) + 3] == ["python", "w.py"]
    assert out[out.index("-w") + 1] == str(tmp_path)


def test_apptainer_on_hosts_is_a_plain_prefix(tmp_path):
    b = hosts_backend(tmp_path, "apptainer")
    program = b.launch(planned(CELLS, b)["gloo"], "R1").spec.program
    assert program[:5] == ("apptainer", "exec", "--bind", str(tmp_path), IMAGE)


def test_engines_each_backend_cannot_use_are_refused():
    with pytest.raises(ValidationError, match="pyxis is Slurm's"):
        HostsConfig.model_validate({"hosts": ["a"], "container": {"image": IMAGE, "engine": "pyxis"}})
    with pytest.raises(ValidationError, match="not Slurm's"):
        SlurmConfig.model_validate({"container": {"image": IMAGE, "engine": "podman"}})
    with pytest.raises(ValidationError):
        HostsConfig.model_validate({"hosts": ["a"], "container": {"image": "bad image"}})


def test_slurm_pyxis_adds_srun_options_and_skips_cells_srun_cannot_start(tmp_path):
    b = SlurmBackend(SlurmConfig.model_validate({"launch": "srun", "cores_per_node": 8, "gpus_per_node": 0,
                                                  "container": {"image": f"registry#{IMAGE}", "engine": "pyxis"}}),
                     tmp_path, timeout_s=60)
    cells = planned(CELLS, b)
    assert cells["gloo"].status == "skipped" and "pyxis needs srun" in cells["gloo"].reason
    script = b.script(cells["openmpi"], "R1")
    assert f"--container-image=registry#{IMAGE}" in script
    assert f"--container-mounts={b.jobs_root}:{b.jobs_root}" in script
    assert "/opt/bench/.venv/bin/python /opt/bench/models/workloads/resnet50/pytorch_worker.py" in script


def test_slurm_apptainer_wraps_each_rank_under_the_launcher(tmp_path):
    b = SlurmBackend(SlurmConfig.model_validate({"cores_per_node": 8, "gpus_per_node": 0,
                                                  "container": {"image": "/shared/bench.sif", "engine": "apptainer"}}),
                     tmp_path, timeout_s=60)
    for p in planned(CELLS, b).values():
        argv = b.render(p, "R1").argv
        i = argv.index("apptainer")
        assert argv[i:i + 5] == ("apptainer", "exec", "--bind", str(b.jobs_root), "/shared/bench.sif")
        assert argv[i + 5:i + 7] == ("/opt/bench/.venv/bin/python",
                                     "/opt/bench/models/workloads/resnet50/pytorch_worker.py")
        assert i > 0  # the launcher (mpirun / horovodrun) starts it
