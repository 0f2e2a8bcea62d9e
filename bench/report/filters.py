"""`--where` selections and `--prices` overrides for the report: parsed and validated, never evaluated.

`--where gpu=V100,framework=pytorch|tensorflow`: comma-separated `key=value` terms, `|` between alternatives; every
term must hold. Keys are the cell keys (plus `nodes`); values are typed by the key (true/false/on/off for booleans,
integers for counts, `null` for an unset value).
"""
from __future__ import annotations

import datetime as dt
from pathlib import Path

import pandas as pd
import yaml

from bench.analysis.cost import Price
from bench.errors import BenchInputError
from bench.cell_keys import CELL_KEYS

_BOOL_KEYS = {"ib", "channels_last"}
_INT_KEYS = {"gpus", "nodes", "loader_workers", "batch_per_gpu", "image_size", "warmup_steps", "steps", "repeats",
             "jobs", "threads", "workers_per_node"}
FILTER_KEYS = (*CELL_KEYS, "nodes")
_TRUE, _FALSE = {"true", "on", "yes", "1"}, {"false", "off", "no", "0"}


def _value(key: str, text: str, where: str):
    text = text.strip()
    if text == "":
        raise BenchInputError(f"empty value for '{key}'", where)
    if text.lower() in ("null", "none"):
        return None
    if key in _BOOL_KEYS:
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise BenchInputError(f"'{key}' takes true/false (on/off), got '{text}'", where)
    if key in _INT_KEYS:
        try:
            return int(text)
        except ValueError:
            raise BenchInputError(f"'{key}' takes a whole number, got '{text}'", where) from None
    return text


def parse_where(text: str | None) -> dict[str, list]:
    """'gpu=V100,framework=pytorch|keras' → {'gpu': ['V100'], 'framework': ['pytorch', 'keras']}."""
    where = "--where"
    if text is None or not text.strip():
        return {}
    terms: dict[str, list] = {}
    for term in text.split(","):
        if "=" not in term:
            raise BenchInputError(f"'{term.strip()}' is not key=value (e.g. gpu=V100,mpi=openmpi|gloo)", where)
        key, _, values = term.partition("=")
        key = key.strip()
        if key.endswith(("!", "<", ">")):
            raise BenchInputError(f"only key=value terms are supported, not '{term.strip()}'", where)
        if key not in FILTER_KEYS:
            raise BenchInputError(f"unknown key '{key}' (known: {', '.join(FILTER_KEYS)})", where)
        if key in terms:
            raise BenchInputError(f"'{key}' given twice (use {key}=a|b for alternatives)", where)
        terms[key] = [_value(key, v, where) for v in values.split("|")]
    return terms


def apply_where(records: pd.DataFrame, terms: dict[str, list]) -> pd.DataFrame:
    """The records whose every key takes one of its listed values."""
    if not terms or records.empty:
        return records
    mask = pd.Series(True, index=records.index)
    for key, values in terms.items():
        col = records[key]
        wanted = [v for v in values if v is not None]
        m = col.isin(wanted) if key not in _BOOL_KEYS else col.astype("boolean").isin(wanted).fillna(False)
        if any(v is None for v in values):
            m = m | col.isna()
        mask &= m.astype(bool)
    return records[mask]


def load_prices(path: str | Path) -> dict[str, Price]:
    """A YAML mapping gpu key → {price_per_hour_usd: number (per VM), price_read: date}. Unknown keys, missing or
    negative prices and missing dates are errors naming the file and key."""
    from bench.catalog import catalog

    where = str(path)
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise BenchInputError(f"cannot read prices: {e.strerror}", where) from None
    except yaml.YAMLError as e:
        raise BenchInputError(f"not valid YAML: {str(e).splitlines()[0]}", where) from None
    if not isinstance(data, dict):
        raise BenchInputError("expected a mapping of gpu key → {price_per_hour_usd, price_read}", where)
    known = catalog()
    prices = {}
    for key, entry in data.items():
        if key not in known:
            raise BenchInputError(f"unknown gpu '{key}' (known: {', '.join(known)})", where)
        if not isinstance(entry, dict) or set(entry) - {"price_per_hour_usd", "price_read"}:
            raise BenchInputError(f"{key}: expected {{price_per_hour_usd: number, price_read: date}}", where)
        price, read = entry.get("price_per_hour_usd"), entry.get("price_read")
        if price is not None and (isinstance(price, bool) or not isinstance(price, (int, float)) or price < 0):
            raise BenchInputError(f"{key}.price_per_hour_usd: expected a non-negative number, got {price!r}", where)
        if price is not None and read is None:
            raise BenchInputError(f"{key}.price_read: say when the price was read (YYYY-MM-DD)", where)
        if isinstance(read, (dt.date, dt.datetime)):
            read = read.isoformat()[:10]
        elif read is not None:
            try:
                read = dt.date.fromisoformat(str(read)).isoformat()
            except ValueError:
                raise BenchInputError(f"{key}.price_read: expected a date YYYY-MM-DD, got {read!r}", where) from None
        prices[key] = Price(float(price) if price is not None else None, read, Path(path).name)
    return prices
