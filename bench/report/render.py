"""Writes the report from the store's records only: reports/index.html (self-contained), summary.md, PNG charts."""
from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import pandas as pd
from jinja2 import Environment, PackageLoader, select_autoescape

from bench.analysis.scaling import INPUT_BOUND_BELOW, cell_summary, input_bound, latest_complete, \
    latest_failures, scaling, series_label
from bench.report.charts import scaling_charts

COLUMNS = ["gpu", "framework", "mpi", "IB", "workers", "nodes", "batch/worker", "image", "precision", "data",
           "images/sec", "95% CI", "per worker", "rank spread", "speedup", "efficiency", "baseline", "cell_id"]
LEFT = {"gpu", "framework", "mpi", "IB", "precision", "data", "baseline", "cell_id", "95% CI", "rank spread"}
ENV_COLUMNS = ["host", "cpu", "framework", "horovod", "controller", "MPI library loaded", "gpu", "records"]


def table_rows(table: pd.DataFrame) -> list[dict[str, str]]:
    rows = []
    for _, r in table.iterrows():
        alone = r.series_cells == 1 and r.gpus > 1  # no smaller run of the same series to divide by
        base = "no smaller run in this series" if alone else \
            f"{int(r.baseline_gpus)} worker{'s' if r.baseline_gpus > 1 else ''}: {r.baseline_images_per_sec:,.1f}"
        rows.append({
            "gpu": r.gpu, "framework": r.framework + (" (DDP)" if r.engine == "native" else ""), "mpi": r.mpi,
            "IB": "on" if r.ib else "off",
            "workers": int(r.gpus), "nodes": int(r.nodes), "batch/worker": int(r.batch_per_gpu),
            "image": int(r.image_size), "precision": r.precision, "data": _data_label(r),
            "images/sec": f"{r.images_per_sec:,.1f}",
            "95% CI": f"{r.ci_low:,.1f}–{r.ci_high:,.1f} ({r.ci_over}"
                      + (f", {100 * r.ci_coverage:.0f}% cov." if r.ci_coverage < 0.95 else "") + ")",
            "per worker": f"{r.images_per_sec_per_gpu:,.1f}",
            "rank spread": "—" if pd.isna(r.rank_spread) or r.gpus == 1 else
                           f"{100 * r.rank_spread:.1f}% (slowest: rank {r.slowest_rank})",
            "speedup": "—" if alone else f"{r.speedup:.2f}×",
            "efficiency": "—" if alone else f"{100 * r.efficiency:.0f}%",
            "baseline": base, "cell_id": r.cell_id,
        })
    return rows


def _data_label(r) -> str:
    if r.data != "imagenet":
        return r.data
    label = f"imagenet ({r.data_layout})"
    ratio = getattr(r, "real_vs_synthetic", float("nan"))
    if pd.notna(ratio):
        label += f" {100 * ratio:.0f}% of synthetic"
        if ratio < INPUT_BOUND_BELOW:
            label += " — INPUT-BOUND"
    return label


def environments(ok: pd.DataFrame) -> list[dict[str, str]]:
    seen: dict[tuple, dict] = {}
    for raw in ok["record_json"]:
        env = json.loads(raw).get("env_probe", {})
        gpu = env.get("gpu") or {}
        row = {
            "host": env.get("hostname", "?"), "cpu": f"{env.get('cpu_model')} × {env.get('cpu_count')}",
            "framework": f"{env.get('framework')} {env.get('framework_version')}",
            "horovod": f"{env.get('horovod_version')} ("
                       + ", ".join(k for k, v in (env.get("horovod_built") or {}).items() if v) + ")"
                       if env.get("horovod_version") else "not used",
            "controller": env.get("horovod_controller") or
                          (f"DDP ({env['torch_distributed_backend']})" if env.get("torch_distributed_backend")
                           else "none"), "MPI library loaded": env.get("mpi_library") or "—",
            "gpu": f"{gpu.get('count')}× {gpu.get('model')} (driver {gpu.get('driver')})" if gpu else "none",
        }
        key = tuple(row.values())
        seen.setdefault(key, {**row, "records": 0})["records"] += 1
    return list(seen.values())


def markdown(table: pd.DataFrame, failures: list[dict], store_path: str) -> str:
    lines = ["# ResNet-50 training throughput", "",
             f"From `{store_path}`. Global images/sec = samples of all workers in a barrier-bounded window / its "
             "wall time; median over repeats. Speedup and efficiency divide by the smallest worker count of the "
             "same series (the `baseline` column).", ""]
    rows = table_rows(table)
    if rows:
        lines += ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
        lines += ["| " + " | ".join(str(r[c]) for c in COLUMNS) + " |" for r in rows]
    else:
        lines.append("No measured cells yet.")
    if failures:
        lines += ["", "## Failed cells (latest attempt)", "", "| cell | cell_id | status | reason |", "|---|---|---|---|"]
        lines += [f"| {f['label']} | {f['cell_id']} | {f['status']} | {f['error']} |" for f in failures]
    return "\n".join(lines) + "\n"


def write_report(records: pd.DataFrame, out_dir: Path, store_path: str = "results/bench.db") -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    ok = latest_complete(records)
    table = input_bound(scaling(cell_summary(ok)))
    charts = scaling_charts(table, out_dir) if not table.empty else []
    fails = latest_failures(records)
    failures = [{"label": series_label(r) + f" · {int(r.gpus)} workers", "cell_id": r.cell_id, "status": r.status,
                 "error": r.error, "run_id": r.run_id} for _, r in fails.iterrows()]

    env = Environment(loader=PackageLoader("bench.report", "templates"), autoescape=select_autoescape())
    html = env.get_template("index.html.j2").render(
        store=store_path, n_records=len(records), n_cells=len(table), n_failed=len(failures),
        generated=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        charts=[(title, base64.b64encode(path.read_bytes()).decode()) for title, path in charts],
        columns=COLUMNS, left=LEFT, rows=table_rows(table), failures=failures,
        env_columns=ENV_COLUMNS, environments=environments(ok) if not ok.empty else [])
    index = out_dir / "index.html"
    index.write_text(html, encoding="utf-8")
    summary = out_dir / "summary.md"
    summary.write_text(markdown(table, failures, store_path), encoding="utf-8")
    return [index, summary, *(path for _, path in charts)]
