"""`bench import FILE`: results nobody here measured, loaded into the store beside the measured ones.

Two kinds of file are understood, told apart by their header alone:
- `bench-csv`: the store's own columns, as `bench export --format csv` writes them (round trip);
- `batchai-svg`: the published Azure Batch AI Horovod charts (bench/data/reference/, decoded from the SVG bars), TF
  tf_cnn_benchmarks and PyTorch layouts (bench/facts/reference.py: their columns, and what each published run was). Each
  bar becomes one ok record of a cell.

How imported records are kept apart (no store change needed):
- every imported record's run_id starts with `import:` — `import:<source>:<file sha256[:12]>` for a reference file,
  `import:<source>:<original run_id>` for a bench CSV (an id already starting with `import:` is kept as is);
- its `runs` row says backend `import`, matrix_name `import:<source>`, and plan_json holds the provenance of the file
  (format, path, sha256, rows read and left out);
- each record's record_json is the original record (bench CSV) or an `{"kind": "import", "provenance": {repository,
  path, blob, commit, commit_date, file, file_sha256, line}, "published": {the row as published}}` document;
- reference records get their own cell ids (a hash that includes the source), so they never collide with a cell
  this project measures: `run` resume never skips a cell because a published number exists.

An import is one transaction; the file is read and checked completely before the store is opened, so a bad file
changes nothing (exit 2, one line). The same file imported twice gives the same rows (a record replaces the one with
its key).
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import re
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.core.errors import BenchInputError
from bench.facts import reference
from bench.records.completeness import IMPORT_RUN_PREFIX

_SOURCE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_STATUSES = ("ok", "failed", "timeout", "skipped", "interrupted")
_KEY = ("run_id", "cell_id", "job", "repeat")


def is_imported(run_id: str) -> bool:
    """True for a record that came from `bench import` (what a report overlays instead of measuring)."""
    return isinstance(run_id, str) and run_id.startswith(IMPORT_RUN_PREFIX)


def provenance(record_json: str) -> dict[str, Any]:
    """The provenance of an imported reference record ({} for a measured one)."""
    try:
        doc = json.loads(record_json)
    except (TypeError, ValueError):
        return {}
    return doc.get("provenance", {}) if isinstance(doc, dict) and doc.get("kind") == "import" else {}


@dataclass
class ImportBatch:
    """Everything one import will write: checked, not yet written."""
    path: Path
    fmt: str
    source: str
    sha256: str
    records: list[dict[str, Any]] = field(default_factory=list)  # store rows (column → value)
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)  # run_id → runs row
    left_out: dict[str, int] = field(default_factory=dict)  # reason → rows not imported


# --- reading ----------------------------------------------------------------------------------------------------

def _read_csv(path: Path) -> tuple[list[str], list[tuple[int, dict[str, str]]], bytes]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise BenchInputError("no such file", str(path)) from None
    except IsADirectoryError:
        raise BenchInputError("is a directory, expected a CSV file", str(path)) from None
    except OSError as e:
        raise BenchInputError(f"cannot read: {e.strerror}", str(path)) from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise BenchInputError(f"not UTF-8 text (byte {e.start}): not a CSV file this can import", str(path)) from None
    if "\x00" in text:
        raise BenchInputError("contains NUL bytes: not a CSV file this can import", str(path))
    reader = csv.DictReader(io.StringIO(text, newline=""), strict=True)
    try:
        header = reader.fieldnames
        if not header:
            raise BenchInputError("empty file (no CSV header)", str(path))
        rows = []
        for row in reader:
            line = reader.line_num
            if None in row:
                raise BenchInputError(f"{len(header) + len(row[None])} fields, the header has {len(header)}",
                                      f"{path}:{line}")
            if any(v is None for v in row.values()):
                raise BenchInputError(f"fewer fields than the header's {len(header)}", f"{path}:{line}")
            rows.append((line, row))
    except csv.Error as e:
        raise BenchInputError(f"malformed CSV: {e}", f"{path}:{reader.line_num}") from None
    if len(set(header)) != len(header):
        raise BenchInputError("duplicate column names in the header", f"{path}:1")
    return list(header), rows, raw


def read_import(path: str | Path, source: str | None = None, *, store_columns: dict[str, str] | None = None
                ) -> ImportBatch:
    """Parse and check a file completely; raises BenchInputError (one line, naming file:line) on anything wrong."""
    path = Path(path)
    header, rows, raw = _read_csv(path)
    if source is not None and not _SOURCE_RE.match(source):
        raise BenchInputError(f"--source {source!r}: use letters, digits, '.', '_' or '-' (at most 64)")
    sha = hashlib.sha256(raw).hexdigest()
    cols = set(header)
    if cols == set(reference.HEADER):
        kinds = {row["framework"].split(" ")[0].lower() for _, row in rows}
        default = {"tensorflow": "batchai-tf", "pytorch": "batchai-pytorch"}.get(kinds.pop() if len(kinds) == 1
                                                                                else "", "batchai")
        batch = ImportBatch(path, "batchai-svg", source or default, sha)
        _adapt_batchai(batch, rows)
    elif {"run_id", "cell_id", "repeat", "status", "record_json"} <= cols:
        default = re.sub(r"[^A-Za-z0-9._-]", "-", path.stem)[:64].lstrip("._-") or "csv"
        batch = ImportBatch(path, "bench-csv", source or default, sha)
        _adapt_bench_csv(batch, header, rows, store_columns or _store_columns())
    else:
        raise BenchInputError("unrecognised file: its header is neither a `bench export --format csv` file nor a "
                              "known reference layout (Batch AI tf_cnn_benchmarks / PyTorch charts)", f"{path}:1")
    if not batch.records:
        raise BenchInputError("no rows to import", str(path))
    return batch


# --- the store's own CSV ------------------------------------------------------------------------------------------

def _store_columns() -> dict[str, str]:
    from bench.store import record_columns

    return record_columns()



def _convert(value: str, kind: str, column: str, where: str) -> Any:
    if value == "":
        return None
    try:
        if kind == "INTEGER":
            if value in ("True", "true"):
                return 1
            if value in ("False", "false"):
                return 0
            number = float(value)
            if not number.is_integer():
                raise ValueError
            return int(number)
        if kind == "REAL":
            number = float(value)
            if not math.isfinite(number):
                raise ValueError
            return number
    except ValueError:
        raise BenchInputError(f"{column}: {value!r} is not a valid {kind.lower()}", where) from None
    return value


# Store migration 13 renamed these columns (the workload became an axis; the values were always samples/s).
RENAMED_COLUMNS = {"images_per_sec": "samples_per_sec", "images_per_sec_per_gpu": "samples_per_sec_per_gpu",
                   "slowest_rank_images_per_sec": "slowest_rank_samples_per_sec"}


def _adapt_bench_csv(batch: ImportBatch, header: list[str], rows, store_columns: dict[str, str]) -> None:
    from bench.analysis.mfu import EXPORT_COLUMNS
    from bench.records.schema import parse_record

    # Exports from before store migration 13 name the rate columns by images: the same values under today's names.
    header = [RENAMED_COLUMNS.get(c, c) for c in header]
    rows = ((line, {RENAMED_COLUMNS.get(c, c): v for c, v in raw.items()}) for line, raw in rows)
    # What `bench export` derives from each record (MFU, power) is recomputed from the record, never imported.
    header = [c for c in header if c not in EXPORT_COLUMNS]
    unknown = [c for c in header if c not in store_columns]
    if unknown:
        raise BenchInputError(f"column '{unknown[0]}' is not a column of this bench's store (exported by a newer "
                              "bench?)", f"{batch.path}:1")
    seen: set[tuple] = set()
    for line, raw in rows:
        where = f"{batch.path}:{line}"
        row = {c: _convert(raw[c], store_columns[c], c, where) for c in header}
        for required in ("run_id", "cell_id", "repeat", "status", "record_json"):
            if row.get(required) is None:
                raise BenchInputError(f"{required} is empty", where)
        row.setdefault("job", 0)
        row["job"] = row["job"] or 0
        if row["status"] not in _STATUSES:
            raise BenchInputError(f"status {row['status']!r} is not one of {', '.join(_STATUSES)}", where)
        if row["status"] == "ok" and not (row.get("samples_per_sec") or 0) > 0:
            raise BenchInputError("an ok record needs a positive samples_per_sec", where)
        try:
            doc = json.loads(row["record_json"])
        except ValueError as e:
            raise BenchInputError(f"record_json is not valid JSON: {e}", where) from None
        if not isinstance(doc, dict):
            raise BenchInputError("record_json must be a JSON object", where)
        if doc.get("kind", "measurement") == "measurement":
            record = parse_record(doc, where)
            for key in ("cell_id", "repeat", "job", "status"):
                if getattr(record, key) != row[key]:
                    raise BenchInputError(f"{key} {row[key]!r} disagrees with its record_json "
                                          f"({getattr(record, key)!r})", where)
        elif doc.get("kind") == "import":
            if not isinstance(doc.get("provenance"), dict) or doc.get("cell_id") != row["cell_id"]:
                raise BenchInputError("imported record_json without provenance or with another cell_id", where)
        else:
            raise BenchInputError(f"record_json kind {doc.get('kind')!r} is unknown", where)
        original = row["run_id"]
        row["run_id"] = original if is_imported(original) else f"{IMPORT_RUN_PREFIX}{batch.source}:{original}"
        if row.get("written_unix") is None:
            row["written_unix"] = time.time()
        key = tuple(row[k] for k in _KEY)
        if key in seen:
            raise BenchInputError(f"duplicate record (run {original}, cell {row['cell_id']}, job {row['job']}, "
                                  f"repeat {row['repeat']})", where)
        seen.add(key)
        batch.records.append(row)
        if row["run_id"] not in batch.runs:
            batch.runs[row["run_id"]] = _run_row(batch, row["run_id"], original_run_id=original)
    for run in batch.runs.values():
        plan = json.loads(run["plan_json"])
        plan["import"]["records"] = sum(r["run_id"] == run["run_id"] for r in batch.records)
        run["plan_json"] = json.dumps(plan, sort_keys=True)


def _run_row(batch: ImportBatch, run_id: str, **extra) -> dict[str, Any]:
    import bench

    plan = {"import": {"source": batch.source, "format": batch.fmt, "file": str(batch.path),
                       "file_name": batch.path.name, "sha256": batch.sha256, "left_out": batch.left_out, **extra}}
    return {"run_id": run_id, "matrix_name": f"import:{batch.source}", "matrix_path": str(batch.path),
            "backend": "import", "host": socket.gethostname(), "bench_version": bench.__version__,
            "plan_json": json.dumps(plan, sort_keys=True)}


# --- the published Batch AI charts --------------------------------------------------------------------------------

# The layout (reference.HEADER) and what each published `mpi` value was (reference.RUNS: bench's MPI flavour, the
# engine, the fabric, which is also the transport the run asked for) are bench/facts/reference.py's.


def _number(raw: dict[str, str], column: str, where: str, kind=float) -> Any:
    try:
        value = kind(raw[column])
    except ValueError:
        raise BenchInputError(f"{column}: {raw[column]!r} is not a number", where) from None
    if isinstance(value, float) and not (math.isfinite(value) and value > 0):
        raise BenchInputError(f"{column}: {raw[column]!r} must be a finite positive number", where)
    if kind is int and value < 1:
        raise BenchInputError(f"{column}: {raw[column]!r} must be at least 1", where)
    return value


def imported_cell_id(source: str, cell: dict[str, Any]) -> str:
    """Cell id of an imported reference cell: includes the source, so it never equals a measured cell's id."""
    text = ";".join([f"import={source}", *(f"{k}={cell[k]}" for k in sorted(cell))])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _adapt_batchai(batch: ImportBatch, rows) -> None:
    from bench.facts.catalog import catalog

    skus = catalog()
    run_id = f"{IMPORT_RUN_PREFIX}{batch.source}:{batch.sha256[:12]}"
    now = time.time()
    seen: dict[str, int] = {}
    for line, raw in rows:
        where = f"{batch.path}:{line}"
        if raw["status"].startswith("superseded"):
            # An older version of a chart: either the same jobs re-plotted or an earlier run of the same cell.
            # Importing it would count one bar twice as two repeats of one cell.
            batch.left_out["superseded chart version"] = batch.left_out.get("superseded chart version", 0) + 1
            continue
        if not raw["status"].startswith("final"):
            raise BenchInputError(f"status {raw['status']!r}: expected final… or superseded…", where)
        framework = raw["framework"].split()[0].lower()
        if framework not in ("tensorflow", "pytorch"):
            raise BenchInputError(f"framework {raw['framework']!r} is neither TensorFlow nor PyTorch", where)
        gpu = raw["gpu_type"]
        if gpu not in skus:
            raise BenchInputError(f"gpu_type {gpu!r} is not a catalogue key", where)
        if skus[gpu].vm_size != raw["vm_size"]:
            raise BenchInputError(f"vm_size {raw['vm_size']!r} is not the catalogue's {skus[gpu].vm_size!r} for {gpu}",
                                  where)
        run = reference.RUNS.get(raw["mpi"])
        if run is None:
            raise BenchInputError(f"mpi {raw['mpi']!r} is not one of {', '.join(reference.RUNS)}", where)
        mpi, ib, engine, requested = run.mpi, run.ib, run.engine, run.fabric
        if raw["data"] != "synthetic":
            raise BenchInputError(f"data {raw['data']!r}: only synthetic-data charts are known", where)
        gpus = _number(raw, "total_gpus", where, int)
        nodes = _number(raw, "nodes", where, int)
        per_node = _number(raw, "gpus_per_node", where, int)
        if nodes * per_node != gpus or per_node > skus[gpu].gpus_per_vm:
            raise BenchInputError(f"{nodes} nodes × {per_node} GPUs ≠ {gpus} GPUs, or more GPUs than a "
                                  f"{raw['vm_size']} has", where)
        if mpi == "none" and gpus != 1:
            raise BenchInputError("a run without MPI must use one GPU", where)
        total = _number(raw, "images_per_sec_total", where)
        per_gpu = _number(raw, "images_per_sec_per_gpu", where)
        if not math.isclose(per_gpu * gpus, total, rel_tol=1e-3, abs_tol=0.05):
            raise BenchInputError(f"images_per_sec_per_gpu {per_gpu} × {gpus} ≠ images_per_sec_total {total}", where)
        cell = {"gpu": gpu, "framework": framework, "mpi": mpi, "ib": ib, "gpus": gpus, "model": raw["model_arg"],
                "engine": engine, "data": "synthetic", "data_layout": None, "loader_workers": None,
                "batch_per_gpu": _number(raw, "batch_size_per_gpu", where, int), "image_size": 224,
                "precision": "fp32", "warmup_steps": None, "steps": None, "repeats": 1, "jobs": 1,
                "channels_last": None, "threads": None}
        cid = imported_cell_id(batch.source, cell)
        if cid in seen:
            raise BenchInputError(f"a second final bar for the same cell (first on line {seen[cid]})", where)
        seen[cid] = line
        prov = {"repository": raw["source_repo"], "path": raw["source_path"], "blob": raw["svg_blob"],
                "commit": raw["first_commit"], "commit_date": raw["commit_date"], "chart_status": raw["status"],
                "chart_title": raw["svg_title"], "file": batch.path.name, "file_sha256": batch.sha256, "line": line}
        doc = {"schema": 1, "kind": "import", "source": batch.source, "format": batch.fmt, "run_id": run_id,
               "cell_id": cid, "cell": cell, "job": 0, "repeat": 0, "status": "ok", "nodes": nodes,
               "samples_per_sec": total, "samples_per_sec_per_gpu": per_gpu, "world_size": gpus,
               "provenance": prov, "published": dict(raw)}
        batch.records.append({
            "run_id": run_id, "cell_id": cid, "job": 0, "repeat": 0, "status": "ok", "error": None,
            **{k: int(v) if isinstance(v, bool) else v for k, v in cell.items()},
            "nodes": nodes, "samples_per_sec": total, "samples_per_sec_per_gpu": per_gpu,
            "world_size": gpus if mpi != "none" else None,
            "requested_transport": requested, "effective_transport": "unknown",
            "transport_evidence": f"published setup: {raw['interconnect']}",
            "workload_version": raw["framework"].split("(", 1)[-1].rstrip(")") if "(" in raw["framework"] else None,
            "record_json": json.dumps(doc, sort_keys=True), "written_unix": now})
    batch.runs[run_id] = _run_row(batch, run_id, records=len(batch.records))


# --- writing ------------------------------------------------------------------------------------------------------

def write_import(store, batch: ImportBatch) -> int:
    """Writes a checked batch through the store, in one transaction (all rows or none). Returns the records
    written."""
    return store.import_rows(batch.runs.values(), batch.records)


def import_file(path: str | Path, store_path: str | Path, source: str | None = None) -> tuple[ImportBatch, int]:
    """Read and check FILE fully, then write it to the store in one transaction (retried while the store is
    busy)."""
    from bench.store import Store

    batch = read_import(path, source)  # nothing is opened or created before the file is known good
    with Store(store_path) as store:
        n = write_import(store, batch)
    return batch, n
