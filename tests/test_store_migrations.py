"""The store's migrations are frozen history: their SQL never changes, and a store left at any earlier schema
upgrades to today's with its rows."""
import hashlib
import sqlite3

import pytest

from bench.planning.matrix import CELL_KEYS
from bench.records.schema import parse_record
from bench.store import MIGRATIONS, STORE_SCHEMA_VERSION, Store
from tests.factories import record

# sha256 of each migration's SQL text. A migration that has shipped is never edited (stores made since replay it
# as written); a schema change is a new migration, and a new line here.
MIGRATION_SHA256 = {
    1: "c4e2616ea142530aaaf0208dac443b0c211cb5d568236c137bc628dc5fbece6a",
    2: "8ab19ddaa7e5b33053acda311f20ba81518993b41ca3d340e1d0e25202868033",
    3: "3d35a50dcd3263aace7179dd515114169788cdefffa3141759ce15c3b1a81004",
    4: "8fe5cc89cd4f3d4d8f30138f56888bbcc2c0ba88ee0d1a63e0fde348ba45c65c",
    5: "82aa3e5b6ca2d44a448ced6fc1b2822209ee8596cccd250174e9c0198f433da1",
    6: "b89b9f56e5a0b7168e2d48be1b312aef6027e583d6039774219d9e3aeeeb5d7e",
    7: "32fcc925d2bba510df5b5f58829ec76b4903159b326e6df8fb92c81049a1d0b9",
    8: "b6dbbacbc3ccf0519c1b9cb75a3526596fd04b91a8d2014a4932710926562135",
    9: "62a59491cc08fc0e2d73612c2d754d3b85c7ca523e52c8c6f2d8ec87800f27f3",
    10: "982e2e87331f51c0c38936f1f6b3334c2d2b6cd37e95a6a8a010b55ffac1533d",
    11: "1e832ddb25e9edcb027fffd035bca22f45670698c6b57a4156a1b1717327455c",
    12: "a5565febc3060384af7e232379259b163e41db455baa3ede4cafbaa62515f149",
    13: "225391e232d5f39eac1b250fd4f50ffaba5d635f0e8ed6ba5794ce840a82b68e",
    14: "aa75fce4e5087edb0755a1b502ef6674b60b5706a6d7fdfd30339f1601e23ff9",
    15: "8c6025ad6a576194487c156d23641027dfe0957f5e5daf005779a887134e8ff6",
}


def test_every_migration_text_is_frozen():
    assert sorted(MIGRATIONS) == list(range(1, STORE_SCHEMA_VERSION + 1))
    assert set(MIGRATIONS) == set(MIGRATION_SHA256), "record each new migration's sha256 here"
    for version, text in MIGRATIONS.items():
        assert hashlib.sha256(text.encode()).hexdigest() == MIGRATION_SHA256[version], (
            f"migration {version} was edited; write the change as a new migration instead")


def _columns(conn) -> list[str]:
    return [r[1] for r in conn.execute("PRAGMA table_info(records)")]


def test_the_records_table_has_a_column_per_cell_key(tmp_path):
    with Store(tmp_path / "b.db") as store:
        missing = [k for k in CELL_KEYS if k not in _columns(store.conn)]
    assert not missing, f"cell keys with no store column (add a migration): {missing}"


def _old_store(path, schema: int):
    """A store as the bench of `schema` left it, holding one record (run `old`); that record."""
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
    for version in range(1, schema + 1):  # what the bench of that schema ran, statement by statement
        conn.executescript(MIGRATIONS[version])
        conn.execute("INSERT INTO schema_version VALUES (?)", (version,))
    old = parse_record(record(run_id="old", repeats=1))
    rate = "images_per_sec" if schema < 13 else "samples_per_sec"  # migration 13 renamed it
    conn.execute(f"INSERT INTO records (run_id, cell_id, repeat, status, gpu, gpus, repeats, model, {rate}, "
                 "record_json, written_unix) VALUES (?, ?, 0, 'ok', 'cpu', 1, 1, 'resnet50', ?, ?, 0)",
                 (old.run_id, old.cell_id, old.samples_per_sec, old.to_json()))
    if schema >= 2:
        conn.execute("UPDATE records SET jobs = 1")
    conn.commit()
    conn.close()
    return old


@pytest.mark.parametrize("schema", range(1, STORE_SCHEMA_VERSION))
def test_a_store_left_at_an_earlier_schema_upgrades_with_its_rows(tmp_path, schema):
    path = tmp_path / "old.db"
    old = _old_store(path, schema)
    with Store(tmp_path / "fresh.db") as fresh:
        today = _columns(fresh.conn)
    with Store(path) as store:
        assert store.schema_version == STORE_SCHEMA_VERSION
        assert _columns(store.conn) == today
        assert store.completed_cells() == {old.cell_id}
        new = parse_record(record(run_id="new", repeats=1, gpus=2))
        store.write(new)
        rows = {r["run_id"]: r for r in store.records()}
        assert rows["old"]["samples_per_sec"] == old.samples_per_sec and rows["old"]["job"] == 0
        # Every row from before the workload was an axis counts images (migration 13).
        assert (rows["old"]["sample_unit"], rows["old"]["rate_unit"], rows["old"]["units_per_sample"]) == \
            ("image", "img/s", 1)
        assert rows["new"]["gpus"] == 2 and store.completed_cells() == {old.cell_id, new.cell_id}


def test_migration_13_renames_the_rate_and_leaves_a_collective_sweep_without_a_unit(tmp_path):
    """The image-rate columns become the generic samples/s with their values; a collective cell's row (no training
    rate) gets no unit; an old record's JSON, which names its rate images_per_sec, still parses to the same value."""
    path = tmp_path / "old.db"
    old = _old_store(path, 12)
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO records (run_id, cell_id, repeat, status, model, record_json, written_unix) "
                 "VALUES ('sweep', 'c0ffee000000', 0, 'ok', 'allreduce', '{}', 0)")
    conn.commit()
    conn.close()
    with Store(path) as store:
        columns = _columns(store.conn)
        rows = {r["run_id"]: r for r in store.records()}
    assert "images_per_sec" not in columns and "slowest_rank_samples_per_sec" in columns
    assert rows["sweep"]["rate_unit"] is None and rows["sweep"]["units_per_sample"] is None
    legacy = old.to_json().replace('"samples_per_sec"', '"images_per_sec"')
    assert '"images_per_sec"' in legacy and parse_record(legacy).samples_per_sec == old.samples_per_sec


@pytest.mark.parametrize("schema", [1, STORE_SCHEMA_VERSION - 1, STORE_SCHEMA_VERSION])
def test_reading_a_store_read_only_never_writes_its_file(tmp_path, schema):
    """The verbs that only read (report, status, export, check, history) open stores read-only: an older store is
    read at today's schema from a migrated copy in memory, and the file (and its folder) stays as it was."""
    from bench.store import StoreError

    path = tmp_path / "old.db"
    old = _old_store(path, schema)
    before = path.read_bytes()
    with Store(path, read_only=True) as store:
        assert store.schema_version == STORE_SCHEMA_VERSION
        assert store.completed_cells() == {old.cell_id}
        assert [r["run_id"] for r in store.records()] == ["old"]
        with pytest.raises(StoreError):  # a write is refused (in place: read-only; a copy: would be lost)
            store.write(parse_record(record(run_id="new", repeats=1)))
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["old.db"]
    with Store(path) as store:  # a writer still migrates it in place
        assert store.schema_version == STORE_SCHEMA_VERSION
    assert path.read_bytes() != before or schema == STORE_SCHEMA_VERSION


def test_a_missing_store_is_not_made_by_a_reader(tmp_path):
    from bench.store import StoreError

    with pytest.raises(StoreError, match="no results store here"):
        Store(tmp_path / "none.db", read_only=True)
    assert not list(tmp_path.iterdir())
