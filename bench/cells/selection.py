"""Choosing cells: one syntax wherever a verb selects cells (`--where` of `plan`, `run`, `report` and `status`,
`history --cell`, `check --normalize ratio-to:`), parsed, validated and applied here, never evaluated as code; every
refusal is one line naming the option and what is wrong (bench.core.errors.BenchInputError: exit 2).

    gpu=V100|A100,ib=on,gpus=8|16      comma-separated key=value terms, `|` between alternatives; every term holds
    layout=pp=2,schedule=1f1b,m=4      (a layout keeps its own commas: its keys are no selection keys)
    35a9a1812f60                       a bare cell id, 6 to 64 hex digits (the same as cell_id=35a9a1812f60)

Keys are `cell_id`, the cell keys (bench/cells/keys.py) and `nodes`. Values are typed by their key: true/false
(on/off, yes/no, 1/0) for booleans, whole numbers for counts, `null` (or `none`) for an unset value, text otherwise;
so `gpus=1` matches a stored 1 or 1.0, and `ib=on` a stored 1 or True.
"""
from __future__ import annotations

import re
from typing import Any

import pandas as pd

from bench.cells.keys import BOOL_KEYS, CELL_KEYS

SELECTION_KEYS = ("cell_id", *CELL_KEYS, "nodes")
INT_KEYS = frozenset({"gpus", "nodes", "loader_workers", "batch_per_gpu", "image_size", "warmup_steps", "steps",
                      "repeats", "jobs", "threads", "workers_per_node", "max_message_bytes"})
_TRUE, _FALSE = {"true", "on", "yes", "1"}, {"false", "off", "no", "0"}
_CELL_ID = re.compile(r"[0-9a-f]{6,64}")

Selection = dict[str, list[Any]]  # key → the values it may take (None: unset)


def _bad(message: str, where: str):
    from bench.core.errors import BenchInputError  # imported here: analysis matches selections without the CLI's errors

    return BenchInputError(message, where)


def _value(key: str, text: str, where: str) -> Any:
    text = text.strip()
    if text == "":
        raise _bad(f"empty value for '{key}'", where)
    if text.lower() in ("null", "none"):
        return None
    if key in BOOL_KEYS:
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise _bad(f"'{key}' takes true/false (on/off), got '{text}'", where)
    if key in INT_KEYS:
        try:
            return int(text)
        except ValueError:
            raise _bad(f"'{key}' takes a whole number, got '{text}'", where) from None
    return text


def _terms(text: str) -> list[str]:
    """The comma-separated terms, where a layout's own commas stay in its value: `layout=pp=2,schedule=1f1b,m=4`
    is one term, since `schedule` and `m` are no selection keys (and no layout key is one)."""
    terms: list[str] = []
    for piece in text.split(","):
        key = piece.partition("=")[0].strip()
        if terms and terms[-1].partition("=")[0].strip() == "layout" and "=" in piece and key not in SELECTION_KEYS:
            terms[-1] += "," + piece
        else:
            terms.append(piece)
    return terms


def parse_selection(text: str | None, where: str = "--where") -> Selection:
    """'gpu=V100,framework=pytorch|keras' → {'gpu': ['V100'], 'framework': ['pytorch', 'keras']}; a bare cell id →
    {'cell_id': [id]}; empty → {} (every cell). `where` names the option in error messages."""
    if text is None or not text.strip():
        return {}
    terms: Selection = {}
    for term in _terms(text):
        if "=" not in term and _CELL_ID.fullmatch(term.strip()):
            term = f"cell_id={term.strip()}"
        if "=" not in term:
            raise _bad(f"'{term.strip()}' is not key=value (e.g. gpu=V100,mpi=openmpi|gloo)", where)
        key, _, values = term.partition("=")
        key = key.strip()
        if key.endswith(("!", "<", ">")):
            raise _bad(f"only key=value terms are supported, not '{term.strip()}'", where)
        if key not in SELECTION_KEYS:
            raise _bad(f"unknown key '{key}' (known: {', '.join(SELECTION_KEYS)})", where)
        if key in terms:
            raise _bad(f"'{key}' given twice (use {key}=a|b for alternatives)", where)
        terms[key] = [_value(key, v, where) for v in values.split("|")]
    return terms


def matches(frame: pd.DataFrame, selection: Selection) -> pd.Series:
    """Boolean mask of the rows whose every selected key takes one of its listed values. A key the frame lacks
    matches only `null`."""
    mask = pd.Series(True, index=frame.index)
    for key, values in selection.items():
        col = frame[key] if key in frame else pd.Series(None, index=frame.index, dtype=object)
        wanted = [v for v in values if v is not None]
        if key in BOOL_KEYS:
            m = col.astype("boolean").isin(wanted).fillna(False)
        elif key in INT_KEYS:
            m = pd.to_numeric(col, errors="coerce").isin(wanted)
        else:
            m = col.astype(object).isin(wanted)
        if any(v is None for v in values):
            m = m | col.isna()
        mask &= m.astype(bool)
    return mask


def describe(selection: Selection) -> str:
    """The selection written back in its own syntax (for messages)."""
    def text(v: Any) -> str:
        return "null" if v is None else ("true" if v is True else "false" if v is False else str(v))
    return ",".join(f"{k}={'|'.join(text(v) for v in values)}" for k, values in selection.items())


def select(frame: pd.DataFrame, text: str | None, among: str, where: str = "--where") -> pd.DataFrame:
    """The rows of `frame` that the selection `text` picks (every row for none given). A selection that picks no row
    is bad input, one line in every verb's words: "'gpu=H100' matches none of " + `among`, what it was matched
    against ("the matrix's 4 cells", "the 15 cells with a complete run")."""
    chosen = parse_selection(text, where)
    if not chosen:
        return frame
    picked = frame[matches(frame, chosen)] if len(frame.columns) else frame
    if picked.empty:
        raise _bad(f"'{describe(chosen)}' matches none of {among}", where)
    return picked
