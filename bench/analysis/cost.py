"""What a measured throughput costs, as pure functions (no I/O).

A cell runs on `nodes` whole VMs and pays for every GPU of each, used or not: cost per hour = VM price × nodes.
$ per million images = cost per hour / (images/sec × 3600) × 10⁶; images per $ is its inverse × 10⁶.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class Price:
    usd_per_hour: float | None  # per VM; None: no price known
    read: str | None  # the date the price was read (ISO)
    source: str  # "catalogue" or the override file


def catalogue_prices() -> dict[str, Price]:
    from bench.facts.catalog import catalog

    return {key: Price(sku.price_per_hour_usd, sku.price_read, "catalogue") for key, sku in catalog().items()}


def merge_prices(base: dict[str, Price], override: dict[str, Price] | None) -> dict[str, Price]:
    """The user's prices win, key by key; the rest stay from the catalogue."""
    return {**base, **(override or {})}


def cost_table(summary: pd.DataFrame, prices: dict[str, Price]) -> pd.DataFrame:
    """Adds usd_per_hour, usd_per_million_images, images_per_usd, price_read and price_source to a cell summary,
    sorted cheapest per image first; cells without a price keep NaN and `price_source` = "no price", last."""
    out = summary.copy()
    if out.empty:
        for c in ("vm_usd_per_hour", "usd_per_hour", "usd_per_million_images", "images_per_usd"):
            out[c] = pd.Series(dtype=float)
        out["price_read"] = pd.Series(dtype=object)
        out["price_source"] = pd.Series(dtype=object)
        return out
    none = Price(None, None, "no price")
    vm_price = [(prices.get(g) or none) for g in out["gpu"]]
    out["vm_usd_per_hour"] = [p.usd_per_hour if p.usd_per_hour is not None else np.nan for p in vm_price]
    out["price_read"] = [p.read for p in vm_price]
    out["price_source"] = [p.source if p.usd_per_hour is not None else "no price" for p in vm_price]
    out["usd_per_hour"] = out["vm_usd_per_hour"] * out["nodes"].astype(float)
    images_per_hour = out["samples_per_sec"].astype(float) * 3600.0
    out["usd_per_million_images"] = out["usd_per_hour"] / images_per_hour * 1e6
    out["images_per_usd"] = images_per_hour / out["usd_per_hour"]
    return out.sort_values("usd_per_million_images", na_position="last", kind="stable").reset_index(drop=True)
