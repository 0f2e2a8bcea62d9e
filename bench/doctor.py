"""What this machine can run: frameworks, Horovod's build (checked by importing), MPI launchers, GPUs.

`bench doctor` exits 1 and names what is missing when the default matrix's cpu cells could not run.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from bench.backends.local import local_gpus

# Runs in a child process: importing torch and TensorFlow into the CLI would cost seconds for nothing.
_PROBE = r"""
import importlib, json, os
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1"); os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
out = {}
for name, mod in (("pytorch", "torch"), ("tensorflow", "tensorflow")):
    try:
        out[name] = importlib.import_module(mod).__version__
    except Exception as e:
        out[name] = None; out[name + "_error"] = f"{type(e).__name__}: {e}"[:200]
try:
    import tf_keras; out["keras"] = "tf-keras " + tf_keras.__version__
except Exception as e:
    out["keras"] = None
try:
    import horovod; out["horovod"] = horovod.__version__
except Exception as e:
    out["horovod"] = None
for name, mod in (("pytorch", "horovod.torch"), ("tensorflow", "horovod.tensorflow")):
    try:
        h = importlib.import_module(mod)
        out["horovod_" + name] = {"mpi": bool(h.mpi_built()), "gloo": bool(h.gloo_built()), "nccl": bool(h.nccl_built())}
    except Exception as e:
        out["horovod_" + name] = None
print(json.dumps(out))
"""


def _version_line(argv: list[str]) -> str | None:
    if not shutil.which(argv[0]):
        return None
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = (out.stdout or out.stderr).strip().splitlines()
    return lines[0] if lines else None


def _caps(built: dict | None) -> str:
    if not built:
        return "not built"
    return ", ".join(k for k, v in built.items() if v) or "nothing"


def examine() -> tuple[list[str], list[str]]:
    """(report lines, missing pieces that stop the default matrix's cpu cells)."""
    probe = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=300)
    info = json.loads(probe.stdout) if probe.returncode == 0 else {}
    horovodrun = os.path.join(os.path.dirname(sys.executable), "horovodrun")
    mpirun = _version_line(["mpirun", "--version"])
    gpus = local_gpus()
    lines = [
        f"python       {sys.version.split()[0]} ({sys.executable})",
        f"cpu cores    {os.cpu_count()}",
        f"pytorch      {info.get('pytorch') or 'missing'}",
        f"tensorflow   {info.get('tensorflow') or 'missing'}",
        f"keras        {info.get('keras') or 'missing'}",
        f"horovod      {info.get('horovod') or 'missing'}",
        f"  pytorch    {_caps(info.get('horovod_pytorch'))}",
        f"  tensorflow {_caps(info.get('horovod_tensorflow'))}",
        f"launchers    mpirun: {mpirun or 'missing'}; horovodrun: "
        f"{'found' if os.path.exists(horovodrun) else 'missing'}",
        f"gpus         {', '.join(gpus) if gpus else 'none (CPU fallback cells only)'}",
    ]
    missing = []
    for framework in ("pytorch", "tensorflow"):
        if not info.get(framework):
            missing.append(f"{framework} ({info.get(framework + '_error', 'not importable')})")
        built = info.get(f"horovod_{framework}") or {}
        for controller in ("gloo", "mpi"):
            if not built.get(controller):
                missing.append(f"horovod for {framework} with {controller}")
    if not info.get("keras"):
        missing.append("tf-keras (Keras 2 for Horovod's Keras integration)")
    if not mpirun:
        missing.append("mpirun (Open MPI)")
    if not os.path.exists(horovodrun):
        missing.append("horovodrun")
    return lines, missing


def flavours(timeout_s: float = 120) -> dict[str, str | None]:
    """Each MPI flavour (and Gloo) tried for real: a 2-rank Horovod allreduce under its own launcher and runtime.
    Flavour -> None if it works, else why not (one line)."""
    from pathlib import Path

    from bench.backends.jobs import MODELS_DIR, tool_path as _tool_path
    from bench.launch import LAUNCHERS, LaunchSpec
    from bench.runtimes import runtime_for

    result: dict[str, str | None] = {}
    for name, launcher in LAUNCHERS.items():
        rt = runtime_for(name)
        if not Path(rt.python).exists():
            result[name] = f"no runtime at {rt.python} (run `make run`)"
            continue
        tool = rt.tool(launcher.TOOL) or _tool_path(launcher.TOOL, rt.python)
        if not os.path.exists(tool) and not shutil.which(tool):
            result[name] = f"{launcher.TOOL} not found"
            continue
        spec = LaunchSpec(workers=2, hosts=(("localhost", 2),), program=(rt.python, str(MODELS_DIR / "mpi_probe.py")),
                          env={"OMP_NUM_THREADS": "1", **rt.env}, as_root=os.geteuid() == 0)
        rendered = launcher.render(spec, tool)
        env = {**os.environ, **rendered.env, "PATH": os.pathsep.join((*rt.bin_dirs, os.environ.get("PATH", "")))}
        try:
            out = subprocess.run(rendered.argv, env=env, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            result[name] = f"a 2-rank allreduce did not finish in {timeout_s:g} s"
            continue
        found = [json.loads(line[line.index("{"):]) for line in out.stdout.splitlines() if '"sum_ok"' in line]
        if out.returncode != 0 or not found or not found[0]["sum_ok"] or found[0]["mpi_enabled"] != (name != "gloo"):
            last = (out.stderr or out.stdout).strip().splitlines()[-1:] or ["no output"]
            result[name] = f"2-rank allreduce failed (exit {out.returncode}): {last[0][:160]}"
        else:
            result[name] = None
            result[name + ":library"] = "Horovod's Gloo controller, no MPI" if name == "gloo" else found[0]["mpi_library"]
    return result


def report() -> tuple[str, int]:
    lines, missing = examine()
    works = flavours()
    for name in ("openmpi", "intelmpi", "mpich", "gloo"):
        if name in works:
            why = works[name]
            lines.append(f"mpi {name:<9} " + (f"works ({works.get(name + ':library') or 'library unknown'})"
                                              if why is None else f"NOT WORKING: {why}"))
            if why is not None:
                missing.append(f"mpi flavour {name} ({why})")
    if missing:
        lines.append("MISSING for the default matrix's cpu cells: " + "; ".join(missing) + " (run `make run` to install)")
    else:
        lines.append("ok: this machine can run the default matrix's cpu cells")
    return "\n".join(lines), 1 if missing else 0
