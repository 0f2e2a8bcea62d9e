"""Records are validated and recomputed from their own per-rank data before they reach the store."""
import json
import math

import pytest

from bench.core.errors import BenchInputError
from bench.records.schema import parse_record
from tests.factories import record


def test_a_worker_record_validates():
    r = parse_record(record(gpus=2))
    assert r.status == "ok" and r.samples_per_sec == pytest.approx(128 / 2.0)
    assert len(r.per_rank) == 2


@pytest.mark.parametrize("mutate,words", [
    (lambda d: d.update(samples_per_sec=d["samples_per_sec"] * 2), "samples / window_s"),
    (lambda d: d.update(samples=d["samples"] + 1), "sum of per-rank samples"),
    (lambda d: d.update(samples_per_sec=-5.0), "finite positive"),
    (lambda d: d.update(samples_per_sec=1e12), "finite positive"),
    (lambda d: d.update(world_size=3), "world_size 3"),
    (lambda d: d.update(window_s=0.5, samples_per_sec=d["samples"] / 0.5), "shorter than a rank"),
    (lambda d: d.update(status="failed"), "must say why"),
    (lambda d: d.update(schema=99), "newer than this bench"),
    (lambda d: d.update(bogus=1), "bogus"),
    (lambda d: d.pop("cell_id"), "cell_id"),
    (lambda d: d.update(per_rank=[]), "per_rank"),
])
def test_bad_records_are_rejected_with_the_reason(mutate, words):
    data = record(gpus=2)
    mutate(data)
    with pytest.raises(BenchInputError) as e:
        parse_record(data, where="x.json")
    assert str(e.value).startswith("x.json: ") and words in str(e.value)


def test_nan_and_truncated_json_are_rejected():
    text = json.dumps(record())
    with pytest.raises(BenchInputError, match="not a valid JSON record"):
        parse_record(text[: len(text) // 2])
    with pytest.raises(BenchInputError, match="NaN"):
        parse_record(text.replace(str(record()["samples_per_sec"]), "NaN", 1))
    d = record()
    d["samples_per_sec"] = math.inf
    with pytest.raises(BenchInputError, match="finite positive"):
        parse_record(d)
