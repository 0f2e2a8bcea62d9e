"""What the installed Horovod builds serve (bench/launch/bindings.py): the plan skips a pair whose environment lacks its
binding, with the fix; `bench doctor` shows framework x flavour; a worker that cannot import its binding under a
launcher says which module, which environment and the fix (models/measure/common.py, import_horovod)."""
import json
import shutil
import sqlite3
import sys
import sysconfig
from pathlib import Path

import pytest

from bench.launch.bindings import binding_reason, built_bindings
from tests.conftest import TINY_WORKLOAD, bench_cli

EXT = sysconfig.get_config_var("EXT_SUFFIX")


def venv_layout(root: Path, bindings: tuple[str, ...]) -> Path:
    """A venv's files as install.sh leaves them, with Horovod's extensions for `bindings` only (what a build with
    BENCH_HOROVOD_FRAMEWORKS=pytorch leaves: horovod/tensorflow without its mpi_lib)."""
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "python").touch()
    (root / "pyvenv.cfg").write_text("home = /usr/bin\n")
    package = root / "lib" / "python3.11" / "site-packages" / "horovod"
    for b in ("torch", "tensorflow"):
        (package / b).mkdir(parents=True)
        (package / b / "__init__.py").touch()
    for b in bindings:
        (package / b / f"{'mpi_lib_v2' if b == 'torch' else 'mpi_lib'}{EXT}").touch()
    return root


def test_the_bindings_are_read_from_the_environments_own_files(tmp_path):
    assert built_bindings(str(venv_layout(tmp_path / "a", ("torch",)) / "bin" / "python")) == {"torch"}
    assert built_bindings(str(venv_layout(tmp_path / "b", ("torch", "tensorflow")) / "bin" / "python")) \
        == {"torch", "tensorflow"}
    bare = tmp_path / "c"
    (bare / "bin").mkdir(parents=True)
    (bare / "bin" / "python").touch()
    (bare / "pyvenv.cfg").touch()
    assert built_bindings(str(bare / "bin" / "python")) == frozenset()  # no Horovod of its own
    assert built_bindings(str(tmp_path / "nowhere" / "bin" / "python")) == frozenset()


def test_this_checkouts_environments_serve_every_framework_under_every_flavour():
    """The default install (scripts/install.sh): both bindings in both environments."""
    cells = [{"framework": f, "mpi": m, "engine": "horovod", "gpus": 2}
             for f in ("pytorch", "tensorflow", "keras") for m in ("openmpi", "intelmpi", "mpich", "gloo")]
    assert [(c["framework"], c["mpi"], binding_reason(c)) for c in cells if binding_reason(c)] == []


def test_a_pytorch_only_build_skips_tensorflow_and_keras_with_the_fix(tmp_path):
    mpich_venv = venv_layout(tmp_path / "venv-mpich", ("torch",))
    (tmp_path / "m.yaml").write_text(f"""
name: bindings
{TINY_WORKLOAD}
axes:
  gpu: [cpu]
  framework: [pytorch, tensorflow, keras]
  mpi: [openmpi, mpich, intelmpi]
  gpus: [1, 2]
  channels_last: [true]
""", encoding="utf-8")
    out = bench_cli("plan", "m.yaml", "--format", "json", cwd=tmp_path, env={"BENCH_MPICH_VENV": str(mpich_venv)})
    assert out.returncode == 0, out.stderr
    skipped = {(c["framework"], c["mpi"], c["gpus"]): c["reason"] for c in json.loads(out.stdout)
               if c["status"] == "skipped"}
    # one worker exchanges nothing (it runs without Horovod); PyTorch's binding is there; Open MPI's is the main venv's
    assert sorted(skipped) == [(f, m, 2) for f in ("keras", "tensorflow") for m in ("intelmpi", "mpich")]
    reason = skipped[("tensorflow", "mpich", 2)]
    # named relative to where bench runs, when it is inside it
    assert "the Horovod in venv-mpich has horovod.torch only, not horovod.tensorflow" in reason
    assert "`make run` builds it" in reason
    table = bench_cli("plan", "m.yaml", cwd=tmp_path, env={"BENCH_MPICH_VENV": str(mpich_venv)})
    assert "horovod.torch only, not horovod.tensorflow" in table.stdout


@pytest.mark.launcher
def test_a_worker_that_cannot_import_its_binding_fails_the_cell_naming_module_environment_and_fix(tmp_path):
    """The real Horovod, shadowed on the workers' path by a copy without its TensorFlow extension: Horovod's own check
    refuses the import, as in an environment built for PyTorch alone. The plan reads the environment's own files and
    plans the cell; the workers must then stop with the cause, not run as two single processes."""
    import horovod

    shadow = tmp_path / "shadow"
    shutil.copytree(Path(horovod.__file__).parent, shadow / "horovod",
                    ignore=lambda d, names: [n for n in names
                                             if Path(d).name == "tensorflow" and n.startswith("mpi_lib")])
    (tmp_path / "m.yaml").write_text(f"""
name: no-binding
{TINY_WORKLOAD}
axes:
  gpu: [cpu]
  framework: [tensorflow]
  mpi: [openmpi]
  gpus: [2]
  channels_last: [true]
""", encoding="utf-8")
    run = bench_cli("run", "m.yaml", "--no-probe", cwd=tmp_path, env={"PYTHONPATH": str(shadow)})
    assert run.returncode == 1, run.stderr[-3000:]
    with sqlite3.connect(tmp_path / "results" / "bench.db") as conn:
        [(status, error)] = conn.execute("SELECT status, error FROM records").fetchall()
    assert status == "failed"
    assert f"horovod.tensorflow cannot be imported in the environment {sys.prefix}" in error, error
    assert "Extension horovod.tensorflow has not been built" in error and "`make run` builds it" in error, error
    assert "workers ran, the cell asked for" not in error
