"""The 1-worker cell whose rate is a multi-worker cell's X(1): its twin (every setting equal but the worker
count), else the best stand-in, one that differs only in settings one worker's rate does not depend on
(STAND_IN_KEYS); and, when there is neither, why not, in words a reader can act on (pure: rows in, a row out).
"""
from __future__ import annotations

import math
from typing import Any, Mapping

from bench.analysis.flavours import FlavourFacts
from bench.cells.keys import INPUT_KEYS

# The settings in which a 1-worker cell may differ from a multi-worker cell and still give it X(1), because one
# worker's compute does not depend on them. Everything else must be equal: the GPU, framework, precision, batch, image
# size, memory layout, threads, warm-up and steps per window change the step or what a window measures, and so does
# the data (real data adds decoding and loading to every step: a synthetic 1-worker cell is no X(1) for a real-data
# cell).
# - mpi: the MPI flavour (or Gloo) carries the allreduce between workers; one worker exchanges nothing, so the
#   flavour never touches its step.
# - engine: Horovod or PyTorch's native DDP wraps the allreduce; one worker's forward, backward and update are the
#   framework's own either way (an allreduce over one rank is no exchange).
# - ib: the fabric carries traffic between nodes; one worker sends nothing over it.
# - repeats, jobs: how many windows and separate launches measured the rate: more of them narrow X(1)'s interval
#   (which is carried through), they do not move the rate.
STAND_IN_KEYS = ("mpi", "engine", "ib", "repeats", "jobs")
# When several 1-worker cells qualify, the one differing in fewest settings wins, then each key's order of preference
# here. The flavours' own order is theirs (FlavourFacts.stand_in_order: MPI flavours first, a worker started by an
# MPI launcher like the cell's own, Open MPI, Horovod's usual build, first of them); counts have none.
_PREFERENCE: dict[str, tuple] = {"engine": ("horovod", "native"), "ib": (False, True), "repeats": (), "jobs": ()}


class OneWorker:
    """Finds the 1-worker cell whose rate is a multi-worker cell's X(1) among `rows` (cell_summary rows): its twin
    (every setting equal but the worker count), else the best stand-in (STAND_IN_KEYS, by `flavours`' order among
    flavours); and, when there is neither, why not, in words a reader can act on."""

    def __init__(self, rows: list[Mapping[str, Any]], flavours: FlavourFacts):
        from bench.analysis.scaling import SERIES_KEYS

        self.preference = {**_PREFERENCE, "mpi": tuple(flavours.stand_in_order)}
        self.keys = list(SERIES_KEYS)
        self.ones = [r for r in rows if int(r["gpus"]) == 1]
        self.twins = {_series(r): r for r in self.ones}
        self.by_rest: dict[tuple, list[Mapping[str, Any]]] = {}
        for r in self.ones:
            self.by_rest.setdefault(_rest(r), []).append(r)

    def baseline(self, row: Mapping[str, Any]) -> tuple[Mapping[str, Any] | None, tuple[str, ...]]:
        """(the 1-worker cell, the STAND_IN_KEYS it differs in: () for the twin), or (None, ())."""
        twin = self.twins.get(_series(row))
        if twin is not None:
            return twin, ()
        best = None
        for one in self.by_rest.get(_rest(row), ()):
            differs = tuple(k for k in STAND_IN_KEYS if _value(one, k) != _value(row, k))
            rank = (len(differs), tuple(self._rank(k, _value(one, k)) for k in STAND_IN_KEYS), str(one["cell_id"]))
            if best is None or rank < best[0]:
                best = (rank, one, differs)
        return (best[1], best[2]) if best else (None, ())

    def _rank(self, key: str, value) -> int:
        order = self.preference[key]
        return order.index(value) if value in order else len(order)

    def why_none(self, row: Mapping[str, Any]) -> str:
        """Why `row` has no X(1): no 1-worker cell at all, none with its data, or what the nearest one differs in."""
        if not self.ones:
            return "no 1-worker cell in this store"
        import numpy as np

        mine = np.array([_value(row, k) for k in self.keys], dtype=object)
        theirs = np.array([[_value(r, k) for k in self.keys] for r in self.ones], dtype=object)
        free = np.array([k in STAND_IN_KEYS for k in self.keys])
        differ = (theirs != mine) & ~free
        nearest = differ[int(np.argmin(differ.sum(axis=1)))]
        keys = [k for k, d in zip(self.keys, nearest) if d]
        if "data" in keys and set(keys) <= set(INPUT_KEYS):
            return f"no 1-worker cell with {'real' if row.get('data') == 'imagenet' else 'synthetic'} data"
        if keys == ["gpu"]:
            return f"no 1-worker cell on {row.get('gpu')}"
        if set(keys) <= set(INPUT_KEYS):
            return f"no 1-worker cell with the same input pipeline (the nearest differs in {', '.join(keys)})"
        return f"no 1-worker cell with the same compute settings (the nearest differs in {', '.join(keys)})"


_STAND_IN_WORDS = {"engine": {"horovod": "Horovod", "native": "DDP"}, "ib": {True: "IB on", False: "IB off"}}
_COUNT_WORDS = {"repeats": "repeat", "jobs": "job"}


def stand_in_words(one: Mapping[str, Any], differs: tuple[str, ...]) -> str:
    """"the openmpi 1-worker cell": the stand-in named by the settings it differs in; "" for a twin."""
    if not differs:
        return ""
    words = [f"{_value(one, k)}-{_COUNT_WORDS[k]}" if k in _COUNT_WORDS else
             str(_STAND_IN_WORDS.get(k, {}).get(_value(one, k), _value(one, k))) for k in differs]
    return f"the {' · '.join(words)} 1-worker cell"


def _value(row: Mapping[str, Any], key: str):
    v = row.get(key)
    if _missing(v):
        return None
    return bool(v) if key in ("ib", "channels_last") else v


def _series(row: Mapping[str, Any]) -> tuple:
    from bench.analysis.scaling import SERIES_KEYS

    return tuple(None if _missing(row.get(k)) else row.get(k) for k in SERIES_KEYS)


def _rest(row: Mapping[str, Any]) -> tuple:
    """The series less STAND_IN_KEYS: what a stand-in must share."""
    from bench.analysis.scaling import SERIES_KEYS

    return tuple(_value(row, k) for k in SERIES_KEYS if k not in STAND_IN_KEYS)


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))
