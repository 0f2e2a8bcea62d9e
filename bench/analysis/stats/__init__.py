"""Statistics, in one place: every interval, rank test and t quantile in bench is computed in this package, as pure
functions (numbers in, numbers out) without scipy (tests/test_stats.py checks each one against it). What counts as
an observation, the verdicts and their thresholds stay with the callers (regress.py, paired.py, scaling.py, ...).

- intervals.py: the interval of a median (the sign-test interval) and the seeded percentile bootstraps (of a median,
  of a ratio of two medians, of any statistic of n items).
- ranks.py: two independent samples by rank: the exact Mann–Whitney test and the Moses interval that goes with it.
- mean_tests.py: inference on a mean: Student's t (quantiles, the t-interval and its one-sided test) and the
  anytime-valid confidence sequence for a mean looked at after every new value.
- noise.py: a series' noise, robustly from its first differences.
"""
