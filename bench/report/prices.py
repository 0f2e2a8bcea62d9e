"""`bench report --prices FILE`: price overrides for the cost section, parsed and validated. (`--where` is
bench/cells/selection.py's syntax, the one every verb that selects cells uses.)"""
from __future__ import annotations

import datetime as dt
from pathlib import Path

import yaml

from bench.analysis.cost import Price
from bench.core.errors import BenchInputError


def load_prices(path: str | Path) -> dict[str, Price]:
    """A YAML mapping gpu key → {price_per_hour_usd: number (per VM), price_read: date}. Unknown keys, missing or
    negative prices and missing dates are errors naming the file and key."""
    from bench.facts.catalog import catalog

    where = str(path)
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise BenchInputError(f"cannot read prices: {e.strerror}", where) from None
    except UnicodeDecodeError:
        raise BenchInputError("not a text file (UTF-8)", where) from None
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
