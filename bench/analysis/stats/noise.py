"""The noise of a series, for telling a step in it from its scatter (bench history's change points)."""
from __future__ import annotations

import math

import numpy as np


def noise_sigma(values: np.ndarray) -> float:
    """The standard deviation of a series' noise from its first differences, robustly: MAD / 0.6745 / √2 (a
    difference of two independent values has √2 times their spread; a step moves one difference only, so it
    barely moves the estimate). 0 below three values."""
    if len(values) < 3:
        return 0.0
    d = np.diff(values)
    return float(np.median(np.abs(d - np.median(d))) / 0.6745 / math.sqrt(2))
