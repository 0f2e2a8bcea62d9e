"""Writes the report from the store's records only: reports/index.html (self-contained: charts embedded),
summary.md, PNG charts and CSV tables.

Every section is computed by the pure functions of bench.analysis; this module only picks, formats and lays out.
A section with nothing to show is left out with a one-line note. Tables over MAX_ROWS rows are cut (the full table
is a CSV next to the page) and the main table is split into one collapsible block per GPU, so the page stays
readable at 5 cells and at 5,000.
"""
from __future__ import annotations

import base64
import importlib
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
from jinja2 import Environment, PackageLoader, select_autoescape

from bench.analysis.collectives import fit_stacks, training_only
from bench.analysis.compare import at_fixed_scale, compare, compare_all, precision_table
from bench.analysis.cost import Price, catalogue_prices, cost_table, merge_prices
from bench.analysis.scaling import INPUT_BOUND_BELOW, SERIES_KEYS, cell_summary, input_bound, latest_complete, \
    latest_failures, scaling, series_label, split_imported, varying_workload_keys
from bench.errors import BenchInputError
from bench.launch import LAUNCHERS
from bench.report import charts as ch
from models.cpufeatures import cpu_line
from models.registry import WORKLOADS

MAX_ROWS = 200  # per HTML/Markdown table; the CSV beside the page has every row
STUDY_MEASURED_SERIES = 6  # measured series drawn per study chart
OPEN_GROUPS_BELOW = 60  # main-table blocks are expanded when the whole table is this small
ENV_SAMPLE = 200  # record_json parsed for the environments table: a sample, never every record

COLUMNS = ["gpu", "framework", "mpi", "IB", "transport", "workers", "nodes", "batch/worker", "image", "precision",
           "data", "images/sec", "95% CI", "per worker", "rank spread", "speedup", "efficiency", "baseline",
           "cell_id"]
LEFT = {"gpu", "framework", "mpi", "IB", "transport", "precision", "data", "baseline", "cell_id", "95% CI",
        "rank spread", "cell", "value", "vs", "verdict", "setting", "price read", "price source", "vm",
        "transport (a)", "transport (b)", "source", "reason", "status", "run", "label"}
ENV_COLUMNS = ["host", "cpu", "framework", "horovod", "controller", "MPI library loaded", "gpu", "records"]


# --- formatting -------------------------------------------------------------------------------------------------
def _num(v, fmt="{:,.1f}", none="—") -> str:
    return none if v is None or pd.isna(v) else fmt.format(v)


def _ci(r) -> str:
    low, high = getattr(r, "boot_low", None), getattr(r, "boot_high", None)
    if low is None or pd.isna(low):
        low, high = r.ci_low, r.ci_high
    text = f"{low:,.1f}–{high:,.1f} ({r.ci_over}"
    n = int(r.ci_over.split()[0]) if isinstance(r.ci_over, str) and r.ci_over.split()[0].isdigit() else 0
    return text + (", too few to trust" if n < 3 else "") + ")"


def _transport(r) -> str:
    eff = getattr(r, "effective_transport", None)
    verdict = getattr(r, "transport_verdict", None)
    text = eff if isinstance(eff, str) and eff else "unknown"
    if verdict == "mismatch":
        req = getattr(r, "requested_transport", None)
        return f"⚠ MISMATCH: {text}" + (f" (asked {req})" if isinstance(req, str) and req else "")
    return text


def _framework(r) -> str:
    return r.framework + (" (DDP)" if getattr(r, "engine", None) == "native" else "")


def table_rows(table: pd.DataFrame) -> list[dict[str, str]]:
    rows = []
    for r in table.itertuples(index=False):
        alone = r.series_cells == 1 and r.gpus > 1  # no smaller run of the same series to divide by
        base = "no smaller run in this series" if alone else \
            f"{int(r.baseline_gpus)} worker{'s' if r.baseline_gpus > 1 else ''}: {r.baseline_images_per_sec:,.1f}"
        rows.append({
            "gpu": r.gpu, "framework": _framework(r), "mpi": r.mpi, "IB": "on" if r.ib else "off",
            "transport": _transport(r),
            "workers": int(r.gpus), "nodes": int(r.nodes), "batch/worker": int(r.batch_per_gpu),
            "image": int(r.image_size), "precision": r.precision, "data": _data_label(r),
            "images/sec": f"{r.images_per_sec:,.1f}", "95% CI": _ci(r),
            "per worker": f"{r.images_per_sec_per_gpu:,.1f}",
            "rank spread": "—" if pd.isna(r.rank_spread) or r.gpus == 1 else
                           f"{100 * r.rank_spread:.1f}% (slowest: rank {r.slowest_rank})",
            "speedup": "—" if alone else f"{r.speedup:.2f}×",
            "efficiency": "—" if alone else f"{100 * r.efficiency:.0f}%",
            "baseline": base, "cell_id": r.cell_id,
            "_bad": getattr(r, "transport_verdict", None) == "mismatch",
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


def _short_label(r, drop: tuple[str, ...] = ()) -> str:
    parts = []
    if "gpu" not in drop:
        parts.append(str(r["gpu"]))
    if "framework" not in drop:
        parts.append(r["framework"] + (" (DDP)" if r.get("engine") == "native" else ""))
    if "mpi" not in drop:
        parts.append(str(r["mpi"]))
    if "ib" not in drop:
        parts.append(f"IB {'on' if r['ib'] else 'off'}")
    if "precision" not in drop:
        parts.append(str(r["precision"]))
    parts.append(f"b{r['batch_per_gpu']}")
    if r.get("data") == "imagenet":
        parts.append(f"ImageNet {r['data_layout']}")
    if "gpus" not in drop:
        parts.append(f"{int(r['gpus'])} workers")
    return " · ".join(parts)


# --- environments (sampled record_json) -------------------------------------------------------------------------
def _cpu_cell(env: dict) -> str:
    """'N × <model name> (vendor family F model M stepping S, microcode …); AMX: yes, AVX-512 BF16: yes, …', and
    torch's kernel level where recorded; records made before the CPU probe show the model name alone."""
    line = f"{env.get('cpu_count')} × " + (cpu_line(env.get("cpu") if isinstance(env.get("cpu"), dict) else None)
                                            or str(env.get("cpu_model")))
    if env.get("torch_cpu_capability"):
        line += f"; torch kernels: {env['torch_cpu_capability']}"
    return line


def environments(record_json: list[str]) -> list[dict[str, str]]:
    seen: dict[tuple, dict] = {}
    for raw in record_json:
        env = json.loads(raw).get("env_probe", {}) if raw else {}
        gpu = env.get("gpu") or {}
        row = {
            "host": env.get("hostname", "?"), "cpu": _cpu_cell(env),
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


def sample_record_json(ok: pd.DataFrame, limit: int = ENV_SAMPLE) -> list[str]:
    """The newest record of each (gpu, framework, mpi, engine), then evenly spread others, up to `limit`."""
    if ok.empty or "record_json" not in ok:
        return []
    order = ok.sort_values("written_unix") if "written_unix" in ok else ok
    first = order.groupby(["gpu", "framework", "mpi", "engine"], dropna=False, sort=False).tail(1)
    rest = order.drop(first.index)
    room = max(0, limit - len(first))
    if room and len(rest):
        rest = rest.iloc[:: max(1, len(rest) // room)].head(room)
    else:
        rest = rest.iloc[0:0]
    return [*first["record_json"].head(limit), *rest["record_json"]]


# --- reading the store ------------------------------------------------------------------------------------------
def read_store(store) -> tuple[pd.DataFrame, list[str]]:
    """Every record without its JSON (the columns hold what the report needs), plus a sample of record JSON for
    the environments table: parsing 100,000 JSON documents would be most of the report's time."""
    return store.dataframe(record_json=False), store.environment_sample(ENV_SAMPLE)


def report_from_store(store_path: str, out_dir: Path, *, where: str | None = None,
                      prices_file: str | None = None) -> list[Path]:
    """`bench report`: all input checked (filters, prices, a store with records) before anything is written."""
    from bench.report.filters import apply_where, load_prices, parse_where
    from bench.store import Store

    terms = parse_where(where)
    override = load_prices(prices_file) if prices_file else None
    with Store(store_path, create=False) as store:
        records, env_json = read_store(store)
        collectives = store.collectives()
    if records.empty:
        raise BenchInputError("the store has no records yet (run `bench run MATRIX` first)", store_path)
    selected = apply_where(records, terms)
    if selected.empty:
        raise BenchInputError(f"no records match '{where}' ({len(records)} records in the store)", "--where")
    if terms:  # the sample must describe what the report shows
        env_json = None if len(selected) < len(records) else env_json
    collectives = collectives[collectives["cell_id"].isin(selected["cell_id"])]
    return write_report(selected, out_dir, store_path=store_path, prices=override, env_json=env_json,
                        where=where if terms else None, collectives=collectives)


# --- sections -----------------------------------------------------------------------------------------------------
def _embed(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def _table(tid: str, columns: list[str], rows: list[dict], *, csv: str | None = None, title: str | None = None,
           open_: bool = True, total: int | None = None) -> dict:
    """A table of at most MAX_ROWS rows; `total` is how many the full table (the CSV) has."""
    return {"id": tid, "columns": columns, "rows": rows[:MAX_ROWS], "total": max(total or 0, len(rows)), "csv": csv,
            "title": title, "open": open_}


def _write_csv(df: pd.DataFrame, out_dir: Path, name: str, written: list[Path]) -> str:
    path = out_dir / name
    df.drop(columns=[c for c in ("ci_values",) if c in df]).to_csv(path, index=False)
    written.append(path)
    return name


def _pair_rows(pairs: pd.DataFrame, axis: str, *, transports: pd.DataFrame | None = None) -> list[dict]:
    rows = []
    for _, p in pairs.iterrows():
        row = {"cell": _short_label(p, drop=(axis,)), "value": str(p.get("value", "")),
               "vs": str(p.get("baseline", "")), "images/sec (value)": f"{p['images_per_sec_a']:,.1f}",
               "images/sec (vs)": f"{p['images_per_sec_b']:,.1f}",
               "ratio": f"{p['ratio']:.3f}", "95% CI": f"{p['ratio_low']:.3f}–{p['ratio_high']:.3f}",
               "verdict": {"a faster": f"{p.get('value')} faster", "b faster": f"{p.get('baseline')} faster"}
               .get(p["verdict"], p["verdict"]), "_bad": False}
        if transports is not None:
            ta, tb = transports.get(p["cell_id_a"]), transports.get(p["cell_id_b"])
            row["transport (a)"], row["transport (b)"] = ta or "unknown", tb or "unknown"
            row["_bad"] = "MISMATCH" in (ta or "") or "MISMATCH" in (tb or "")
        rows.append(row)
    return rows


def _worst_first(pairs: pd.DataFrame) -> pd.DataFrame:
    """Pairs furthest from 1 first: the rows a reader should see when the table is cut."""
    return pairs.iloc[(pairs["ratio"].apply(lambda r: abs(np.log(r)) if r > 0 else np.inf)).argsort()[::-1]]


PAIR_COLUMNS = ["cell", "value", "vs", "images/sec (value)", "images/sec (vs)", "ratio", "95% CI", "verdict"]


def _axis_section(table, axis, title, baseline, out_dir, written, sid) -> dict:
    pairs = compare_all(table, axis, baseline)
    if pairs.empty:
        n = table[axis].nunique() if axis in table else 0
        why = f"only one {axis} value measured" if n < 2 else f"no two cells differ only in {axis}"
        return {"id": sid, "title": title, "omitted": f"{title}: omitted — {why}."}
    base = pairs["baseline"].iloc[0]
    chart = ch.ratio_chart(pairs, f"{title}: images/sec relative to {base} (matched cells)",
                           f"images/sec ÷ images/sec with {base}", out_dir / f"compare_{axis}.png")
    written.append(chart)
    csv = _write_csv(pairs, out_dir, f"compare_{axis}.csv", written)
    summary = pairs.groupby("value")["ratio"].agg(["count", "median", "min", "max"])
    note = "; ".join(f"{v} vs {base}: median ratio {s['median']:.2f} over {int(s['count'])} matched pair"
                     f"{'s' if s['count'] > 1 else ''} (range {s['min']:.2f}–{s['max']:.2f})"
                     for v, s in summary.iterrows())
    return {"id": sid, "title": title, "note": note + ". Ratio > 1: faster than " + str(base) +
            "; the interval is a bootstrap over job-level repeats of both cells.",
            "charts": [(f"{title} (one point per matched pair)", _embed(chart))],
            "tables": [_table(f"{sid}-table", PAIR_COLUMNS, _pair_rows(_worst_first(pairs).head(MAX_ROWS), axis),
                              csv=csv, total=len(pairs))]}


def _gpu_section(table, out_dir, written) -> dict:
    rows, setting = at_fixed_scale(table, "gpu")
    title = "GPU comparison at a fixed scale"
    if rows.empty:
        return {"id": "gpus", "title": title, "omitted": f"{title}: omitted — fewer than two GPU types measured "
                "with otherwise equal settings."}
    n = int(setting["gpus"])
    label = f"{n} workers, " + _short_label({**setting, "gpu": "", "gpus": n}, drop=("gpu", "gpus"))
    shown = rows.assign(label=[f"{r.gpu} ({int(r.nodes)} VM{'s' if r.nodes > 1 else ''})"
                               for r in rows.itertuples()])
    chart = ch.bar_chart(shown, "label", f"ResNet-50 images/sec by GPU at {n} workers", out_dir / "gpus.png")
    written.append(chart)
    from bench.catalog import catalog

    vm = {k: s.vm_size for k, s in catalog().items()}
    trows = [{"gpu": r.gpu, "vm": vm.get(r.gpu, "?"), "nodes": int(r.nodes), "images/sec": f"{r.images_per_sec:,.1f}",
              "95% CI": _ci(r), "per worker": f"{r.images_per_sec_per_gpu:,.1f}",
              "efficiency": "—" if r.series_cells == 1 and r.gpus > 1 else f"{100 * r.efficiency:.0f}%",
              "vs fastest": f"{r.images_per_sec / rows['images_per_sec'].iloc[0]:.2f}×", "cell_id": r.cell_id,
              "_bad": False} for r in rows.itertuples()]
    return {"id": "gpus", "title": title,
            "note": f"Same settings for every GPU: {label} (the setting shared by the most GPU types). "
                    "Bars: bootstrap 95% CI over job-level repeats.",
            "charts": [(f"images/sec by GPU at {n} workers", _embed(chart))],
            "tables": [_table("gpus-table", ["gpu", "vm", "nodes", "images/sec", "95% CI", "per worker",
                                             "efficiency", "vs fastest", "cell_id"], trows)]}


def _ib_section(table, out_dir, written) -> dict:
    title = "InfiniBand on vs off"
    pairs = compare(table, "ib", True, False)
    mism = table[table["transport_verdict"] == "mismatch"] if "transport_verdict" in table else table.iloc[0:0]
    mism_rows = [{"cell": _short_label(r), "transport": _transport(r), "cell_id": r["cell_id"], "_bad": True}
                 for _, r in mism.head(MAX_ROWS).iterrows()]
    tables = []
    if mism_rows:
        tables.append(_table("transport-mismatches", ["cell", "transport", "cell_id"], mism_rows, total=len(mism),
                             title=f"⚠ {len(mism)} cell(s) where the transport that ran is not the one asked for"))
    if pairs.empty:
        if not tables:
            why = "IB on and off not both measured" if table["ib"].nunique() < 2 else \
                "no cell pair differs only in IB"
            return {"id": "ib", "title": title, "omitted": f"{title}: omitted — {why}."}
        return {"id": "ib", "title": title, "note": "No matched on/off pair; transport mismatches below.",
                "tables": tables}
    pairs = pairs.assign(value="IB on", baseline="IB off")
    transports = {r.cell_id: _transport(r) for r in table.itertuples()}
    bad = pd.Series(["MISMATCH" in (transports.get(a) or "") + (transports.get(b) or "")
                     for a, b in zip(pairs["cell_id_a"], pairs["cell_id_b"])])
    mismatch = bad
    ordered = pd.concat([pairs[bad.to_numpy()], _worst_first(pairs[~bad.to_numpy()])])  # mismatches on top
    prows = _pair_rows(ordered.head(MAX_ROWS), "ib", transports=transports)
    chart = ch.ratio_chart(pairs, "IB on vs off: images/sec ratio (matched cells)", "images/sec IB on ÷ IB off",
                           out_dir / "compare_ib.png", mismatch=mismatch)
    written.append(chart)
    csv = _write_csv(pairs.assign(transport_a=[transports.get(c) for c in pairs["cell_id_a"]],
                                  transport_b=[transports.get(c) for c in pairs["cell_id_b"]]),
                     out_dir, "compare_ib.csv", written)
    n_bad = int(mismatch.sum())
    tables.insert(0, _table("ib-table", [*PAIR_COLUMNS, "transport (a)", "transport (b)"], prows, csv=csv,
                            total=len(pairs)))
    return {"id": "ib", "title": title,
            "note": f"{len(pairs)} matched pair(s); median ratio {pairs['ratio'].median():.2f}. The transport "
                    "columns show what the logs say actually carried the traffic"
                    + (f"; {n_bad} pair(s) with a ⚠ MISMATCH (red cross on the chart): their 'IB on' may not "
                       "have used InfiniBand." if n_bad else "; no mismatches."),
            "charts": [("IB on vs off", _embed(chart))], "tables": tables}


def _data_section(table, out_dir, written) -> dict:
    title = "Synthetic vs real data"
    real = table[table["real_vs_synthetic"].notna()] if "real_vs_synthetic" in table else table.iloc[0:0]
    n_real = len(real)
    n_bound = int((real["real_vs_synthetic"] < INPUT_BOUND_BELOW).sum()) if n_real else 0
    if real.empty:
        why = "no real-data cells" if not (table["data"] == "imagenet").any() else \
            "no real-data cell has a synthetic twin"
        return {"id": "data", "title": title, "omitted": f"{title}: omitted — {why}."}
    real = real.sort_values("real_vs_synthetic", kind="stable").head(MAX_ROWS)
    real = real.assign(label=[_short_label(r) for _, r in real.iterrows()])
    chart = ch.real_vs_synthetic_chart(real, INPUT_BOUND_BELOW, out_dir / "real_vs_synthetic.png")
    written.append(chart)
    rows = [{"cell": r["label"] + f" ({r['data_layout']})", "images/sec (real)": f"{r['images_per_sec']:,.1f}",
             "images/sec (synthetic)": f"{r['synthetic_images_per_sec']:,.1f}",
             "real / synthetic": f"{100 * r['real_vs_synthetic']:.0f}%",
             "verdict": "INPUT-BOUND" if r["real_vs_synthetic"] < INPUT_BOUND_BELOW else "ok",
             "cell_id": r["cell_id"], "_bad": bool(r["real_vs_synthetic"] < INPUT_BOUND_BELOW)}
            for _, r in real.iterrows()]
    return {"id": "data", "title": title,
            "note": f"{n_bound} of {n_real} real-data cell(s) are input-bound (below "
                    f"{100 * INPUT_BOUND_BELOW:.0f}% of the synthetic twin: waiting for data, not computing).",
            "charts": [("real vs synthetic", _embed(chart))],
            "tables": [_table("data-table", ["cell", "images/sec (real)", "images/sec (synthetic)",
                                             "real / synthetic", "verdict", "cell_id"], rows, total=n_real)]}


def _cost_section(table, prices: dict[str, Price], out_dir, written) -> dict:
    title = "Cost ranking"
    costs = cost_table(table, prices)
    priced = costs[costs["usd_per_million_images"].notna()]
    csv = _write_csv(costs, out_dir, "cost.csv", written)
    rows = []
    for i, r in enumerate(costs.head(MAX_ROWS).itertuples(), 1):
        has = pd.notna(r.usd_per_million_images)
        rows.append({"rank": str(i) if has else "—", "cell": _short_label(costs.iloc[i - 1]),
                     "nodes": int(r.nodes), "VM $/h": _num(r.vm_usd_per_hour, "${:,.2f}", "no price"),
                     "$/h": _num(r.usd_per_hour, "${:,.2f}", "no price"), "images/sec": f"{r.images_per_sec:,.1f}",
                     "$ per million images": _num(r.usd_per_million_images, "${:,.2f}", "no price"),
                     "images per $": _num(r.images_per_usd, "{:,.0f}", "no price"),
                     "price read": r.price_read or "—", "price source": r.price_source, "cell_id": r.cell_id,
                     "_bad": False})
    charts = []
    if not priced.empty:
        shown = priced.head(ch.MAX_BARS)
        shown = shown.assign(label=[_short_label(r) for _, r in shown.iterrows()])
        chart = ch.bar_chart(shown, "label", "Cheapest cells: $ per million training images (lower is better)",
                             out_dir / "cost.png", xlabel="USD per million images (VM list price × nodes)",
                             value="usd_per_million_images", low="_", high="_", fmt="${:,.2f}")
        written.append(chart)
        charts.append(("$ per million images", _embed(chart)))
    n_none = int(costs["usd_per_million_images"].isna().sum())
    return {"id": "cost", "title": title,
            "note": "Cost per hour = the VM's pay-as-you-go list price × nodes (whole VMs are paid for, used or "
                    "not); $ per million images = cost per hour ÷ (images/sec × 3600) × 10⁶. Prices come from the "
                    "catalogue (each with the date it was read) or `--prices FILE`."
                    + (f" {n_none} cell(s) have no price (unknown or retired SKU, or the CPU fallback): 'no price'."
                       if n_none else ""),
            "charts": charts,
            "tables": [_table("cost-table", ["rank", "cell", "nodes", "VM $/h", "$/h", "images/sec",
                                             "$ per million images", "images per $", "price read", "price source",
                                             "cell_id"], rows, csv=csv, total=len(costs))]}


def _precision_section(table, out_dir, written) -> dict:
    title = "Throughput per precision (DeepLearningExamples style)"
    pt = precision_table(table)
    present = [p for p in ("fp32", "fp16", "bf16") if f"images_per_sec_{p}" in pt]
    if pt.empty or len(present) < 2:
        return {"id": "precision", "title": title,
                "omitted": f"{title}: omitted — only {', '.join(present) or 'no'} precision measured "
                           "(no mixed-precision speedup to show)."}
    csv = _write_csv(pt, out_dir, "precision.csv", written)
    columns = ["gpu", "framework", "mpi", "IB", "batch/worker", "workers"]
    for p in present:
        columns.append(f"images/sec {p}")
    columns += [f"{p} speedup over fp32" for p in ("fp16", "bf16") if p in present and "fp32" in present]
    columns += [f"{p} scaling" for p in present]
    rows = []
    for _, r in pt.head(MAX_ROWS).iterrows():
        row = {"gpu": r["gpu"], "framework": r["framework"] + (" (DDP)" if r.get("engine") == "native" else ""),
               "mpi": r["mpi"], "IB": "on" if r["ib"] else "off", "batch/worker": int(r["batch_per_gpu"]),
               "workers": int(r["gpus"]), "_bad": False}
        for p in present:
            row[f"images/sec {p}"] = _num(r[f"images_per_sec_{p}"])
            eff, sp, base = r[f"efficiency_{p}"], r[f"speedup_{p}"], r[f"baseline_gpus_{p}"]
            row[f"{p} scaling"] = "—" if pd.isna(eff) or (base == r["gpus"] and r["gpus"] > 1) else \
                f"{sp:.2f}× ({100 * eff:.0f}% vs {int(base)})"
        for p in ("fp16", "bf16"):
            if f"{p}_over_fp32" in r:
                row[f"{p} speedup over fp32"] = _num(r[f"{p}_over_fp32"], "{:.2f}×")
        rows.append(row)
    return {"id": "precision", "title": title,
            "note": "One row per setting; mixed-precision speedup = images/sec in fp16/bf16 ÷ images/sec in fp32 of "
                    "the otherwise identical cell; scaling = speedup (efficiency) over the smallest worker count "
                    "of the same series.",
            "tables": [_table("precision-table", columns, rows, csv=csv, total=len(pt))]}


def _latest_sweeps(collectives: pd.DataFrame | None, ok: pd.DataFrame) -> pd.DataFrame:
    """The collective rows of each cell's latest complete run (the runs `ok` holds)."""
    if collectives is None or collectives.empty or ok.empty:
        return pd.DataFrame(columns=["cell_id", "run_id", "bytes", "time_median_s", "busbw_bytes_per_s"])
    return collectives.merge(ok[["cell_id", "run_id"]].drop_duplicates(), on=["cell_id", "run_id"])


def _collectives_section(sweeps: pd.DataFrame) -> dict:
    """Per op (registry order), per collective cell: time, algbw and busbw against message size (median over
    repeats); allreduce cells also show the stack's fitted α/β (the model's input; the other ops are not fitted)."""
    from bench.analysis.collectives import fit_alpha_beta
    from models.registry import COLLECTIVES

    tables = []
    order = {op: i for i, op in enumerate(COLLECTIVES)}
    groups = sorted(sweeps.groupby(["op", "cell_id"], sort=False), key=lambda g: order.get(g[0][0], len(order)))
    for i, ((op, cell), rows) in enumerate(groups):
        first = rows.iloc[0]
        per_size = rows.groupby("bytes").agg(time=("time_median_s", "median"), busbw=("busbw_bytes_per_s", "median"),
                                             algbw=("algbw_bytes_per_s", "median"), repeats=("repeat", "size"))
        trows = [{"bytes": f"{b:,}", "time (median)": f"{r.time * 1e3:,.3f} ms",
                  "algbw": f"{r.algbw / 1e9:,.3f} GB/s", "busbw": f"{r.busbw / 1e9:,.3f} GB/s",
                  "repeats": int(r.repeats), "_bad": False} for b, r in per_size.iterrows()]
        fit = f" · fit: {fit_alpha_beta(rows.to_dict('records')).describe()}" if op == "allreduce" else ""
        title = (f"{op} · {first['gpu']}/{first['mpi']}/{first['engine']}/ib={'on' if first['ib'] else 'off'}"
                 f" · {int(first['world_size'])} workers on {int(first['nodes'])} node(s) · {cell}{fit}")
        tables.append(_table(f"collectives-table-{i + 1}", ["bytes", "time (median)", "algbw", "busbw", "repeats"],
                             trows, title=title, open_=True))
    factors = ", ".join(f"{spec['bus_formula']} for {op}" for op, spec in COLLECTIVES.items())
    return {"id": "collectives", "title": "Collectives: bandwidth vs message size",
            "note": "Collective sweeps by op (docs/collectives.md): time is the slowest rank's, median over iterations "
                    "and repeats; algbw = bytes / time (allgather's bytes: the gathered output), busbw = algbw × "
                    f"factor, {factors} (nccl-tests' definitions). Allreduce cells show the fit time = α + "
                    "2(n−1)/n · bytes / β, with 95% bootstrap intervals.",
            "tables": tables}


def _prediction_section(table, out_dir, written, fits=None) -> dict | None:
    """Only if bench.analysis.model exists and exposes predict(); anything else leaves the section out."""
    title = "Predicted vs measured efficiency"
    try:
        model = importlib.import_module("bench.analysis.model")
    except ImportError:
        return None
    # predict_table(scaled) gives per-cell predictions (predict() itself answers one SKU/worker count at a time).
    predict = getattr(model, "predict_table", None)
    if not callable(predict):
        return None
    try:
        pred = predict(table, fits) if fits else predict(table)
    except Exception as e:  # a model still being written must not break the report
        return {"id": "prediction", "title": title, "omitted": f"{title}: omitted — the what-if model failed "
                f"({type(e).__name__}: {str(e)[:120]})."}
    if not isinstance(pred, pd.DataFrame) or "cell_id" not in pred:
        return {"id": "prediction", "title": title,
                "omitted": f"{title}: omitted — the what-if model returned no per-cell predictions."}
    col = next((c for c in ("predicted_efficiency", "efficiency") if c in pred), None)
    if col is None:
        return {"id": "prediction", "title": title,
                "omitted": f"{title}: omitted — the what-if model gives no efficiency."}
    links = pred["predicted_links"] if "predicted_links" in pred else pd.Series("data sheet", index=pred.index)
    merged = table.merge(pred[["cell_id", col]].rename(columns={col: "predicted_efficiency"})
                         .assign(links=links.fillna("data sheet")), on="cell_id")
    merged = merged[merged["predicted_efficiency"].notna() & (merged["series_cells"] > 1)]
    if merged.empty:
        unusable = sorted({f"{'/'.join(str(k) for k in stack)}: {fit.reason}" for stack, fit in (fits or {}).items()
                           if not fit.usable})
        why = (" CPU cells are predicted from a usable measured allreduce fit only, and this store's are unusable ("
               + "; ".join(unusable) + ")." if unusable else
               " CPU cells are predicted from a measured allreduce sweep of their own stack only, and this store has"
               " none (add `model: allreduce` cells: docs/collectives.md)." if not fits and (table["gpu"] == "cpu").any()
               else "")
        return {"id": "prediction", "title": title,
                "omitted": f"{title}: omitted — no prediction for a scaled cell.{why}"}
    chart = ch.prediction_chart(merged, out_dir / "prediction.png")
    written.append(chart)
    rows = [{"cell": _short_label(r), "efficiency": f"{100 * r['efficiency']:.0f}%",
             "predicted": f"{100 * r['predicted_efficiency']:.0f}%",
             "difference": f"{100 * (r['predicted_efficiency'] - r['efficiency']):+.0f} pts", "links": r["links"],
             "cell_id": r["cell_id"], "_bad": False} for _, r in merged.iterrows()]
    return {"id": "prediction", "title": title, "note": "Predicted by bench.analysis.model (α-β what-if model).",
            "charts": [(title, _embed(chart))],
            "tables": [_table("prediction-table", ["cell", "efficiency", "predicted", "difference", "links",
                                                   "cell_id"], rows)]}


def _study_section(table: pd.DataFrame, out_dir: Path, written: list[Path]) -> dict:
    """The published Batch AI curves per GPU series (read from bench/data/reference/, never from the store), the
    what-if model dashed over them, and this store's measured cells of the same GPU on the same axes."""
    from bench.catalog import catalog
    from bench.report import study

    title = "The 2018 Batch AI study: published scaling, the what-if model, measured here"
    try:
        published = study.published_series()
    except (OSError, KeyError, ValueError) as e:
        return {"id": "study", "title": title, "omitted": f"{title}: omitted — the published reference could not be "
                f"read ({type(e).__name__}: {str(e)[:120]})."}
    predicted = study.predicted_series(published)
    order = {k: i for i, k in enumerate(catalog())}
    gpus = sorted(published["gpu"].unique(), key=lambda g: (order.get(g, len(order)), g))
    varying = varying_workload_keys(table) if not table.empty else []
    charts, measured_here = [], 0
    more, jobs, titles = 0, [], []
    for gpu in gpus:
        mine = table[table["gpu"] == gpu] if not table.empty else table
        if not mine.empty:
            measured_here += len(mine)
            # The longest, then fastest, measured series: a legend of hundreds is unreadable (all are in Scaling).
            groups = sorted(mine.groupby(SERIES_KEYS, dropna=False, sort=False),
                            key=lambda kv: (-len(kv[1]), -kv[1]["images_per_sec"].max()))
            more += max(0, len(groups) - STUDY_MEASURED_SERIES)
            mine = pd.concat([g.assign(label=series_label(g.iloc[0], varying).removeprefix(f"{gpu} · "))
                              for _, g in groups[:STUDY_MEASURED_SERIES]])
        jobs.append((gpu, published[published["gpu"] == gpu], predicted[predicted["gpu"] == gpu], mine,
                     out_dir / f"study_{ch._slug(gpu)}.png", study.PUBLISHED))
        titles.append(f"{gpu}: {study.PUBLISHED} (dotted), what-if model (dashed)"
                      + (", measured here (solid)" if not mine.empty else ""))
    for caption, path in zip(titles, ch.study_figures(jobs)):
        written.append(path)
        charts.append((caption, _embed(path)))
    pred = predicted.set_index(["gpu", "series", "gpus"])["efficiency"]
    rows = [{"gpu": r.gpu, "series": r.series, "workers": int(r.gpus), "images/sec": f"{r.images_per_sec:,.1f}",
             "efficiency": f"{100 * r.efficiency:.0f}%",
             "what-if efficiency": _num(pred.get((r.gpu, r.series, r.gpus)), "{:.0%}"), "source": r.source,
             "_bad": False} for r in published.itertuples()]
    sources = ", ".join(sorted({s.rsplit("/experiments/", 1)[0].rsplit("/plot.svg", 1)[0]
                                for s in published["source"]}))
    return {"id": "study", "title": title,
            "note": f"Dotted, hollow diamonds: {study.PUBLISHED} — ResNet-50, synthetic data, batch 64 per GPU, "
                    "4 GPUs per VM, bar heights read from the SVG charts of " + sources + " (±0.2%); the data is "
                    "bench/data/reference/ in this repository, read by the report and never written to the store, "
                    "so it is in no measured table, resume or check. Intel MPI ran over InfiniBand with Horovod "
                    "built without NCCL; Open MPI + NCCL over TCP. Dashed: the what-if model (bench model) from "
                    "each series' 1-GPU bar. Efficiency divides by the series' own 1-GPU bar. "
                    + (f"Solid: {measured_here} cell(s) measured here on the same GPU types"
                       + (f" (the {STUDY_MEASURED_SERIES} longest series per GPU drawn; {more} more series in the "
                          "Scaling section)." if more else ".")
                       if measured_here else "No cell of these GPU types is measured in this store yet."),
            "charts": charts,
            "tables": [_table("study-table", ["gpu", "series", "workers", "images/sec", "efficiency",
                                              "what-if efficiency", "source"], rows,
                              title=f"Published bars ({study.PUBLISHED})")]}


def reference_summary(imported: pd.DataFrame) -> pd.DataFrame:
    """Published references (imported records): median images/sec per cell, labelled by their source."""
    if imported.empty:
        return pd.DataFrame(columns=["gpu", "gpus", "images_per_sec", "ref_label"])
    ok = imported[imported["status"] == "ok"] if "status" in imported else imported
    ok = ok[ok["images_per_sec"].notna()]
    if ok.empty:
        return pd.DataFrame(columns=["gpu", "gpus", "images_per_sec", "ref_label"])
    src = ok["source"].fillna("") if "source" in ok else pd.Series("", index=ok.index)
    # run ids are import:<source>:<file or run>; the source is what a reader recognises.
    src = src.where(src != "", ok["run_id"].astype(str).str.split(":").str[1].fillna(ok["run_id"].astype(str)))
    ok = ok.assign(ref_source=src)
    keys = [k for k in ("gpu", "framework", "mpi", "ib", "precision", "batch_per_gpu", "data", "gpus") if k in ok]
    out = ok.groupby(["ref_source", *keys], dropna=False, sort=True).agg(
        images_per_sec=("images_per_sec", "median"), nodes=("nodes", "max"), records=("images_per_sec", "size")
    ).reset_index()
    out["ref_label"] = [f"{r.ref_source} · {r.framework} · {r.mpi} · IB {'on' if r.ib else 'off'}"
                        for r in out.itertuples()]
    return out


# --- the report ---------------------------------------------------------------------------------------------------
def write_report(records: pd.DataFrame, out_dir: Path, store_path: str = "results/bench.db", *,
                 prices: dict[str, Price] | None = None, env_json: list[str] | None = None,
                 where: str | None = None, collectives: pd.DataFrame | None = None) -> list[Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    measured, imported = split_imported(records)
    all_ok = latest_complete(measured)
    ok = training_only(all_ok)  # collective cells have no image rates: their own section below
    sweeps = _latest_sweeps(collectives, all_ok)
    table = input_bound(scaling(cell_summary(ok)))
    refs = reference_summary(imported)
    fails = latest_failures(measured)
    failures = [{"label": series_label(r) + f" · {int(r.gpus)} workers", "cell_id": r.cell_id, "status": r.status,
                 "error": r.error, "run_id": r.run_id} for _, r in fails.iterrows()]
    if env_json is None:
        env_json = sample_record_json(ok)
    envs = environments(env_json)

    sections: list[dict] = []
    if table.empty:
        which = "training cell" if not sweeps.empty else "cell"  # collective cells have their own section
        sections.append({"id": "scaling", "title": "Scaling", "omitted": f"Scaling: omitted — no {which} has a "
                         "complete successful run yet" + (" (see the failed cells below)." if failures else ".")})
        sections.append(_study_section(table, out_dir, written))
    else:
        charts = ch.scaling_charts(table, out_dir, refs)
        written += [p for _, p in charts]
        rows = table_rows(table)
        csv = _write_csv(table, out_dir, "cells.csv", written)
        gpus = list(dict.fromkeys(r["gpu"] for r in rows))
        small = len(rows) <= OPEN_GROUPS_BELOW
        tables = []
        for i, g in enumerate(gpus):
            grows = [r for r in rows if r["gpu"] == g]
            tables.append(_table("scaling-table" if i == 0 else f"scaling-table-{i + 1}", COLUMNS, grows, csv=csv,
                                 title=f"{g}: {len(grows)} cell{'s' if len(grows) != 1 else ''}", open_=small))
        sections.append({"id": "scaling", "title": "Scaling: throughput, speedup and efficiency",
                         "note": "Per GPU: throughput vs workers with the ideal line (dashed, from the series' "
                                 "baseline) and efficiency vs workers. Bars: bootstrap 95% CI over job-level repeats "
                                 "(over windows when a cell ran one job)."
                                 + (" Dotted hollow diamonds: published references (imported, not measured here)."
                                    if not refs.empty else ""),
                         "charts": [(t, _embed(p)) for t, p in charts], "tables": tables, "main": True})
        sections.append(_study_section(table, out_dir, written))
        sections.append(_gpu_section(table, out_dir, written))
        # The reference value of each comparison is its registry's first entry (pytorch, openmpi).
        sections.append(_axis_section(table, "framework", "Framework comparison", next(iter(WORKLOADS)), out_dir,
                                      written, "framework"))
        sections.append(_axis_section(table, "mpi", "MPI flavour comparison", next(iter(LAUNCHERS)), out_dir, written,
                                      "mpi"))
        sections.append(_ib_section(table, out_dir, written))
        sections.append(_data_section(table, out_dir, written))
        sections.append(_cost_section(table, merge_prices(catalogue_prices(), prices), out_dir, written))
        sections.append(_precision_section(table, out_dir, written))
        pred = _prediction_section(table, out_dir, written, fit_stacks(sweeps.to_dict("records")))
        if pred is not None:
            sections.append(pred)
    if not sweeps.empty:
        sections.append(_collectives_section(sweeps))
    if not refs.empty:
        rrows = [{"source": r.ref_label, "gpu": r.gpu, "workers": int(r.gpus), "images/sec": f"{r.images_per_sec:,.1f}",
                  "records": int(r.records), "_bad": False} for r in refs.itertuples()]
        sections.append({"id": "references", "title": "Published references (imported, not measured here)",
                         "note": "Shown for comparison only; kept out of every measured table above.",
                         "tables": [_table("references-table", ["source", "gpu", "workers", "images/sec", "records"],
                                           rrows)]})

    env = Environment(loader=PackageLoader("bench.report", "templates"), autoescape=select_autoescape())
    context = dict(store=store_path, n_records=len(records), n_cells=len(table), n_failed=len(failures),
                   n_imported=len(imported), where=where,
                   generated=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), sections=sections, left=LEFT,
                   max_rows=MAX_ROWS, failures=failures, env_columns=ENV_COLUMNS, environments=envs,
                   env_sampled=len(env_json) < len(ok))
    index = out_dir / "index.html"
    index.write_text(env.get_template("index.html.j2").render(**context), encoding="utf-8")
    summary = out_dir / "summary.md"
    summary.write_text(markdown(sections, failures, store_path, where), encoding="utf-8")
    return [index, summary, *written]


def markdown(sections: list[dict], failures: list[dict], store_path: str, where: str | None = None) -> str:
    lines = ["# ResNet-50 training throughput", "",
             f"From `{store_path}`" + (f", records where `{where}`" if where else "") + ". Global images/sec = "
             "samples of all workers in a barrier-bounded window / its wall time; median over repeats. Speedup and "
             "efficiency divide by the smallest worker count of the same series (the `baseline` column). Charts: "
             "the PNG files next to this one.", ""]
    for s in sections:
        if s.get("omitted"):
            lines += [f"_{s['omitted']}_", ""]
            continue
        lines += [f"## {s['title']}", ""]
        if s.get("note"):
            lines += [s["note"], ""]
        for t in s.get("tables", []):
            if t.get("title"):
                lines += [f"### {t['title']}", ""]
            cols = t["columns"]
            lines += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
            lines += ["| " + " | ".join(str(r.get(c, "")).replace("|", "\\|") for c in cols) + " |" for r in t["rows"]]
            if t["total"] > len(t["rows"]):
                lines.append(f"\n{t['total'] - len(t['rows'])} more rows in `{t['csv'] or 'the HTML report'}`.")
            lines.append("")
    if failures:
        lines += ["## Failed cells (latest attempt)", "", "| cell | cell_id | status | reason |", "|---|---|---|---|"]
        lines += [f"| {f['label']} | {f['cell_id']} | {f['status']} | {f['error']} |" for f in failures]
    return "\n".join(lines) + "\n"
