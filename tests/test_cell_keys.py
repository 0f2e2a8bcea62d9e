"""bench/cells/keys.py (what analysis and the store index by) against the matrix schema that defines the keys."""
import pytest

from bench.cells import keys as cell_keys
from bench.planning.matrix import CORE_AXES, Workload, check_cell_keys


def test_keys_equal_the_schema():
    assert cell_keys.AXIS_KEYS == tuple(CORE_AXES)
    assert cell_keys.WORKLOAD_KEYS == tuple(Workload.model_fields)
    assert cell_keys.CELL_KEYS == cell_keys.AXIS_KEYS + cell_keys.WORKLOAD_KEYS
    # (a store column per key: tests/test_store_migrations.py)


def test_a_key_added_to_the_schema_only_is_refused():
    """What bench.planning.matrix runs at import: a Workload field bench.cells.keys lacks (or an axis) stops bench,
    naming it."""
    check_cell_keys(tuple(CORE_AXES), tuple(Workload.model_fields))
    with pytest.raises(RuntimeError, match="out of step.*'new_key'"):
        check_cell_keys(tuple(CORE_AXES), (*Workload.model_fields, "new_key"))
    with pytest.raises(RuntimeError, match="out of step"):
        check_cell_keys((*CORE_AXES, "nodes"), tuple(Workload.model_fields))
