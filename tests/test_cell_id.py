"""Cell ids stay put: ids made before id scheme 1 was written down, a committed baseline and a store from before
all still match the cells planned today, and a key added with its recorded default moves no id."""
import json
import shutil
from pathlib import Path

from bench.checks.baseline import load_baseline
from bench.planning.cell import ID_ADDED_KEY_DEFAULTS, ID_SCHEME_1_KEYS, cell_id, cell_id_text
from bench.planning.matrix import load_matrix, load_matrix_text
from bench.store import STORE_SCHEMA_VERSION, Store

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data"
# Cells and their ids as computed before the scheme change (tests/data/make_cell_id_golden.py says how).
GOLDEN = json.loads((DATA / "cell_ids_golden.json").read_text())
GOLDEN_CELLS = [(c["cell"], c["cell_id"]) for m in GOLDEN for c in m["cells"]]


def test_the_golden_set_covers_every_framework_and_many_settings():
    assert len(GOLDEN_CELLS) >= 30 and len({i for _, i in GOLDEN_CELLS}) == len(GOLDEN_CELLS)
    assert {c["framework"] for c, _ in GOLDEN_CELLS} == {"pytorch", "tensorflow", "keras"}
    assert {c["threads"] for c, _ in GOLDEN_CELLS} >= {None, 1, 4}


def test_matrices_expand_to_the_ids_they_had_before_the_scheme():
    for entry in GOLDEN:
        cells = load_matrix_text(entry["matrix"]).cells()
        new_keys = {k for c in cells for k in c} - ID_SCHEME_1_KEYS
        assert [cell_id(c) for c in cells] == [c["cell_id"] for c in entry["cells"]], (
            f"ids moved for matrix {entry['matrix'].splitlines()[0]!r}; keys added since id scheme 1: "
            f"{sorted(new_keys)} — a new key's matrix default must equal its entry in ID_ADDED_KEY_DEFAULTS "
            "(docs/extending.md, 'Adding a workload key')")


def test_recorded_cells_keep_their_ids():
    for cell, expected in GOLDEN_CELLS:
        assert cell_id(cell) == expected


def test_scheme_1_keys_are_exactly_the_keys_cells_had():
    assert {k for c, _ in GOLDEN_CELLS for k in c} == ID_SCHEME_1_KEYS


def test_a_new_key_at_its_recorded_default_moves_no_id(monkeypatch):
    monkeypatch.setitem(ID_ADDED_KEY_DEFAULTS, "dummy_workers", 4)
    for cell, expected in GOLDEN_CELLS:
        assert cell_id({**cell, "dummy_unlisted": None}) == expected  # unlisted: recorded as None
        assert cell_id({**cell, "dummy_workers": 4}) == expected
        assert cell_id({**cell, "dummy_workers": 4, "dummy_unlisted": None}) == expected


def test_a_new_key_away_from_its_recorded_default_gives_a_new_id(monkeypatch):
    monkeypatch.setitem(ID_ADDED_KEY_DEFAULTS, "dummy_workers", 4)
    monkeypatch.setitem(ID_ADDED_KEY_DEFAULTS, "dummy_flag", False)
    old = {i for _, i in GOLDEN_CELLS}
    for variant in ({"dummy_workers": 8}, {"dummy_workers": None}, {"dummy_flag": True}, {"dummy_flag": 0},
                    {"dummy_unlisted": 0}, {"dummy_unlisted": "x"}):
        ids = [cell_id({**cell, **variant}) for cell, _ in GOLDEN_CELLS]
        assert not old & set(ids), variant
        assert len(set(ids)) == len(ids), variant  # still one id per cell
    cell = GOLDEN_CELLS[0][0]
    assert cell_id({**cell, "dummy_workers": 8}) != cell_id({**cell, "dummy_workers": 16})
    text = cell_id_text({**cell, "dummy_workers": 8})
    assert "dummy_workers=8;" in text and text.startswith("v=1;batch_per_gpu=")  # sorted in among the keys


def test_the_committed_baseline_matches_the_ci_matrix():
    doc = load_baseline(ROOT / "baselines" / "ci-cpu.json")
    planned = {cell_id(c) for c in load_matrix(ROOT / "ci" / "matrix-cpu.yaml").cells()}
    assert {c["cell_id"] for c in doc["cells"]} == planned
    for entry in doc["cells"]:
        assert cell_id(entry["cell"]) == entry["cell_id"]


def test_a_store_from_before_opens_and_resume_counts_its_cells(tmp_path):
    path = tmp_path / "bench.db"
    shutil.copyfile(DATA / "store_before_id_scheme.db", path)
    cells = load_matrix(ROOT / "ci" / "matrix-cpu.yaml").cells()
    with Store(path) as store:
        assert store.schema_version == STORE_SCHEMA_VERSION
        assert store.completed_cells() == {cell_id(c) for c in cells}  # resume would skip both cells
        rows = store.records()
        assert len(rows) == sum(c["jobs"] * c["repeats"] for c in cells)
        for row in rows:
            assert cell_id({k: row[k] if k not in ("ib", "channels_last") else bool(row[k])
                            for k in ID_SCHEME_1_KEYS}) == row["cell_id"]


def test_recorded_defaults_name_keys_added_after_scheme_1():
    from bench.planning.matrix import CELL_KEYS

    assert set(ID_ADDED_KEY_DEFAULTS) <= set(CELL_KEYS) - ID_SCHEME_1_KEYS
