"""What a cell's sample is and the rate users quote for it: ResNet-50's images (img/s), a transformer's sequences
(tokens/s, a sequence being seq_len tokens). The store keeps samples/s with these beside it (store migration 13); every
figure shown to a user is the quoted rate, samples/s x units_per_sample, in rate_unit."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from models.registry.collectives import COLLECTIVES
from models.registry.workloads import units_per_sample, workload_spec


@dataclass(frozen=True)
class RateUnit:
    sample: str  # image | sequence
    rate: str  # img/s | tokens/s
    per_sample: int  # units of `rate` in one sample: 1 image; seq_len tokens


IMAGES = RateUnit("image", "img/s", 1)


def unit_of_cell(cell: Mapping[str, Any]) -> RateUnit | None:
    """The cell's unit from the registry (None: a collective sweep, which has no training rate)."""
    model = cell.get("model") or "resnet50"
    if model in COLLECTIVES:
        return None
    spec = workload_spec(model, cell.get("framework") or "pytorch")
    if spec is None:
        return IMAGES
    return RateUnit(spec["sample_unit"], spec["rate_unit"], units_per_sample(cell))


def quoted(samples_per_sec: float | None, unit: RateUnit) -> float | None:
    """samples/s in the unit users quote."""
    return None if samples_per_sec is None else samples_per_sec * unit.per_sample


def format_value(samples_per_sec: float | None, unit: RateUnit, width: int = 0) -> str:
    """The quoted rate's number alone, for ranges and intervals: '1,234.5', '14,820' (tokens have no useful
    decimals)."""
    return format_quoted(quoted(samples_per_sec, unit), unit.per_sample, width)


def format_quoted(value: float | None, per_sample: int, width: int = 0) -> str:
    """format_value of a rate already in the quoted unit, whose sample holds `per_sample` units."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return f"{'-':>{width}}"
    digits = 0 if per_sample > 1 else 1
    return f"{value:{width},.{digits}f}"


def format_rate(samples_per_sec: float | None, unit: RateUnit, width: int = 0) -> str:
    """A rate as users read it: '1,234.5 img/s', '14,820 tokens/s'."""
    return f"{format_value(samples_per_sec, unit, width)} {unit.rate}"


def image_rows(df):
    """The rows of a frame (store rows, a cell table) whose workload counts images: ResNet-50's, and every row from
    before store migration 13. The report's image sections read only these; other workloads have their own."""
    if df.empty or "rate_unit" not in df:
        return df
    return df[df["rate_unit"].isna() | (df["rate_unit"] == IMAGES.rate)]


def other_rows(df):
    """The rows image_rows leaves out: workloads whose rate is not img/s (a transformer's tokens/s)."""
    if df.empty or "rate_unit" not in df:
        return df.iloc[0:0]
    return df[df["rate_unit"].notna() & (df["rate_unit"] != IMAGES.rate)]
