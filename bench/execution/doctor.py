"""What this machine can run: frameworks, Horovod's build (checked by importing), MPI launchers, GPUs. Each MPI
flavour says what its launcher is and how to render a launch; `probe` starts a 2-rank allreduce with it to prove it.

`bench doctor` exits 1 and names what is missing when the default matrix's cpu cells could not run.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import models
from bench.backends.local.backend import local_gpus
from bench.launch import LAUNCHERS, Flavour, LaunchSpec
from bench.launch.bindings import built_bindings
from bench.launch.runtimes import Runtime, image_abi, not_in_image, runtime_for
from models.registry.workloads import WORKLOADS

# Runs in a child process: importing torch and TensorFlow into the CLI would cost seconds for nothing.
_PROBE = r"""
import importlib, json, os, sys
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1"); os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
workloads = json.loads(sys.argv[1])  # framework -> (module to import, version label, Horovod's module or None)
out = {}
for name, (mod, label, _) in workloads.items():
    try:
        out[name] = label + importlib.import_module(mod).__version__
    except Exception as e:
        out[name] = None; out[name + "_error"] = f"{type(e).__name__}: {e}"[:200]
try:
    import horovod; out["horovod"] = horovod.__version__
except Exception as e:
    out["horovod"] = None
for name, (_, _, mod) in workloads.items():
    if mod is None:
        continue
    try:
        h = importlib.import_module(mod)
        out["horovod_" + name] = {"mpi": bool(h.mpi_built()), "gloo": bool(h.gloo_built()),
                                  "nccl": bool(h.nccl_built())}
    except Exception as e:
        out["horovod_" + name] = None
print(json.dumps(out))
"""


@dataclass(frozen=True)
class Probe:
    """`bench doctor`'s result for one flavour: None problem means a 2-rank allreduce worked under it."""
    problem: str | None
    library: str | None = None  # what ran it, as the job reported


def launcher_version(flavour: Flavour, runtime: Runtime) -> str | None:
    """The flavour's launcher's own version line, or None if it is not there."""
    tool = flavour.tool_path(runtime)
    if tool is None:
        return None
    try:
        out = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [" ".join(ln.split()) for ln in (out.stdout or out.stderr).splitlines() if ln.strip()]
    return next((ln for ln in lines if any(c.isdigit() for c in ln)), lines[0] if lines else None)


def probe(flavour: Flavour, timeout_s: float = 120, python: str | None = None) -> Probe:
    """A 2-rank Horovod allreduce (models/probes/mpi_probe.py) under the flavour's launcher and runtime."""
    rt = runtime_for(flavour.name, python or sys.executable)
    if not Path(rt.python).exists():
        return Probe(f"no runtime at {rt.python} (run `make run`)")
    tool = flavour.tool_path(rt)
    if tool is None:
        return Probe(f"{flavour.tool} not found")
    program = Path(models.__file__).resolve().parent / "probes" / "mpi_probe.py"
    spec = LaunchSpec(workers=2, hosts=(("localhost", 2),), program=(rt.python, str(program)),
                      env={"OMP_NUM_THREADS": "1", **rt.env}, as_root=os.geteuid() == 0)
    rendered = flavour.render(spec, tool)
    env = {**os.environ, **rendered.env, "PATH": os.pathsep.join((*rt.bin_dirs, os.environ.get("PATH", "")))}
    try:
        out = subprocess.run(rendered.argv, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return Probe(f"a 2-rank allreduce did not finish in {timeout_s:g} s")
    found = [json.loads(line[line.index("{"):]) for line in out.stdout.splitlines() if '"sum_ok"' in line]
    if out.returncode != 0 or not found or not found[0]["sum_ok"] \
            or found[0]["mpi_enabled"] != (flavour.controller == "mpi"):
        last = (out.stderr or out.stdout).strip().splitlines()[-1:] or ["no output"]
        return Probe(f"2-rank allreduce failed (exit {out.returncode}): {last[0][:160]}")
    if flavour.controller == "gloo":
        return Probe(None, "Horovod's Gloo controller, no MPI")
    return Probe(None, found[0]["mpi_library"])


def _caps(built: dict | None) -> str:
    if not built:
        return "not built"
    return ", ".join(k for k, v in built.items() if v) or "nothing"


def examine() -> tuple[list[str], list[str]]:
    """(report lines, missing pieces that stop the default matrix's cpu cells)."""
    probing = {name: (w["imports"], w.get("version_label", ""), w["horovod_module"]) for name, w in WORKLOADS.items()}
    probe = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(probing)], capture_output=True, text=True,
                           timeout=300)
    info = json.loads(probe.stdout) if probe.returncode == 0 else {}
    gpus = local_gpus()
    # Each flavour's launcher, as this Python's runtime for it finds it.
    launchers: dict[str, str | None] = {}
    for flavour in LAUNCHERS.values():
        if not_in_image(flavour.name):  # another image's (the report says so)
            continue
        rt = runtime_for(flavour.name, sys.executable)
        if flavour.tool_path(rt) is None:
            launchers[f"{flavour.tool} ({flavour.name})"] = None
        else:
            launchers[f"{flavour.tool} ({flavour.name})"] = launcher_version(flavour, rt) or "found"
    lines = [
        f"python       {sys.version.split()[0]} ({sys.executable})",
        f"cpu cores    {os.cpu_count()}",
        *(f"{name:<12} {info.get(name) or 'missing'}" for name in WORKLOADS),
        f"horovod      {info.get('horovod') or 'missing'}",
        *(f"  {name:<10} {_caps(info.get('horovod_' + name))}" for name, w in WORKLOADS.items()
          if w["horovod_module"]),
        "launchers    " + "; ".join(f"{name}: {version or 'missing'}" for name, version in launchers.items()),
        f"gpus         {', '.join(gpus) if gpus else 'none (CPU fallback cells only)'}",
    ]
    missing = []
    for framework, workload in WORKLOADS.items():
        if not info.get(framework):
            missing.append(f"{workload['imports'].replace('_', '-')} ({workload['needed_for']})" if "needed_for" in
                           workload else f"{framework} ({info.get(framework + '_error', 'not importable')})")
        if not workload["horovod_module"]:
            continue
        built = info.get(f"horovod_{framework}") or {}
        for controller in sorted({f.controller for f in LAUNCHERS.values()}):
            if not built.get(controller):
                missing.append(f"horovod for {framework} with {controller}")
    missing += [name for name, version in launchers.items() if version is None]
    return lines, missing


def bindings_grid() -> tuple[list[str], list[str]]:
    """Framework × MPI flavour as the installed builds serve them (bench/launch/bindings.py, what planning asks): each
    flavour's column names the environment that runs its cells; (table lines, the pairs that cannot run)."""
    columns = [name for name in LAUNCHERS if not not_in_image(name)]
    pythons = {name: runtime_for(name, sys.executable).python for name in columns}
    heads = [f"{name} ({Path(pythons[name]).parent.parent.name})" for name in columns]
    widths = [max(len(h), 7) for h in heads]
    lines = ["horovod binding, framework x mpi (the environment that runs the cells):",
             "  " + f"{'':<12}" + "  ".join(f"{h:<{w}}" for h, w in zip(heads, widths)).rstrip()]
    missing = []
    for framework, workload in WORKLOADS.items():
        binding = workload.get("horovod_binding")
        marks = []
        for name in columns:
            built = built_bindings(pythons[name])
            mark = "unknown" if built is None else "ok" if binding in built else "absent"
            if mark == "absent":
                missing.append(f"horovod.{binding} for {framework} under {name} "
                               f"(in {Path(pythons[name]).parent.parent})")
            marks.append(mark)
        lines.append("  " + f"{framework:<12}" + "  ".join(f"{m:<{w}}" for m, w in zip(marks, widths)).rstrip())
    return lines, missing


def flavours(timeout_s: float = 120) -> dict[str, Probe]:
    """Each MPI flavour (and Gloo) tried for real: a 2-rank Horovod allreduce under its launcher and runtime."""
    return {name: probe(flavour, timeout_s, sys.executable) for name, flavour in LAUNCHERS.items()
            if not not_in_image(name)}


def report() -> tuple[str, int]:
    lines, missing = examine()
    grid, unserved = bindings_grid()
    lines += grid
    missing += unserved
    for name in LAUNCHERS:
        if not_in_image(name):
            lines.append(f"mpi {name:<9} not in this image (built for the {image_abi()} ABI; bench images list)")
    for name, probe in flavours().items():
        lines.append(f"mpi {name:<9} " + (f"works ({probe.library or 'library unknown'})"
                                          if probe.problem is None else f"NOT WORKING: {probe.problem}"))
        if probe.problem is not None:
            missing.append(f"mpi flavour {name} ({probe.problem})")
    if missing:
        lines.append("MISSING for the default matrix's cpu cells: " + "; ".join(missing)
                     + " (run `make run` to install)")
    else:
        lines.append("ok: this machine can run the default matrix's cpu cells" + (
            f" of the {image_abi()} ABI (this image's)" if image_abi() else ""))
    return "\n".join(lines), 1 if missing else 0
