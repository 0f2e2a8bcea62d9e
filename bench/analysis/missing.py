"""How a missing value reads, in every output bench writes: the one place (issue 34: `nan`, `None` and `NaN` never
reach a report, `bench status`, an export or Markdown).

    text, Markdown, HTML   MISSING ("—"), or a short reason where the caller knows why the value is missing
                           (the report's main table says "1 worker: the baseline", "no 1-worker cell with real
                           data", ...; the cost table "no price")
    CSV                    an empty field (CSV_MISSING)
    JSON                   null (a real JSON null: never the string "nan", never a bare NaN or Infinity token, which
                           are not JSON)

A value is missing when it is None, a NaN (Python, numpy), pandas' NA or NaT, or ±infinity (a ratio over a zero:
no number a reader can use either). Strings are never missing, whatever they say.
"""
from __future__ import annotations

import math
import numbers
from typing import Any

MISSING = "—"
CSV_MISSING = ""


def is_missing(v: Any) -> bool:
    if v is None:
        return True
    if isinstance(v, (str, bytes, bool)):
        return False
    if isinstance(v, numbers.Number):  # numpy scalars are registered numbers
        try:
            return not math.isfinite(v)
        except (TypeError, OverflowError, ValueError):  # complex, huge ints: present
            return False
    try:
        return bool(v != v)  # NaT (and other NaN-like scalars)
    except TypeError:  # pandas' NA: its comparisons are NA themselves
        return True
    except ValueError:  # an array: present
        return False


def text(v: Any, fmt: str = "{}", missing: str = MISSING) -> str:
    """`v` formatted for text, Markdown or HTML, or `missing` (a dash, or the caller's reason) when it is missing."""
    return missing if is_missing(v) else fmt.format(v)


def json_value(v: Any) -> Any:
    """`v` as JSON can hold it: None for a missing value, numpy scalars as Python's."""
    if is_missing(v):
        return None
    return v.item() if hasattr(v, "item") and not isinstance(v, (str, bytes)) else v


def csv_ready(df):
    """`df` for a CSV file, written with `na_rep=CSV_MISSING` (every CSV bench writes is): NaN, None and NA write as
    na_rep, but ±inf as "inf", so those become NaN here."""
    import numpy as np

    floats = [c for c in df.columns if df[c].dtype.kind == "f"]
    if not floats:
        return df
    return df.assign(**{c: df[c].where(np.isfinite(df[c])) for c in floats})


def json_lines(df) -> str:
    """`df` as JSON lines, one object per row; a missing value (NaN, NA, NaT, ±inf) is null: pandas' writer makes
    it so and never writes a NaN token."""
    return df.to_json(orient="records", lines=True)
