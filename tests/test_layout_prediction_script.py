"""benchmarks/layout_prediction_shaped.py without the cluster, on the stores of its two runs kept in
benchmarks/results (docs/layouts.md, "Against the emulated nodes"): the comparison reads back as the docs give it,
the prediction is anchored on each layout's one-node twin (same tiers on both sides: the twin's own figure back), and
bad arguments get one line and exit 2."""
import shutil
import sqlite3
import subprocess
import sys

import pytest

from bench.planning.cell import cell_id
from bench.planning.matrix import load_matrix
from benchmarks import layout_prediction_shaped as script
from benchmarks.prediction_shaped import training_matrix
from models.registry.collectives import COLLECTIVES
from tests.conftest import ROOT

STORES = sorted((ROOT / "benchmarks" / "results").glob("layouts-shaped-*.db"))
LAYOUTS = {"tp=2", "pp=2,schedule=1f1b,m=4", "dp_replicate=2,dp_shard=2", "dp_shard=4"}


def test_every_run_is_kept():
    assert [p.stem for p in STORES] == [f"layouts-shaped-{i}" for i in range(1, 8)], STORES


# The errors (points) of each kept store under today's model, as docs/lab/2026-12-07-pipeline-tied-embedding.md
# quotes them (the pipeline's tied-embedding all-reduce priced; the runs' own notes, 2026-12-06-layouts-shaped-
# prediction.md and 2026-12-06-pipeline-exchange.md, quote the model of their day).
QUOTED = {
    "layouts-shaped-1": {"tp=2": -1.0, "dp_replicate=2,dp_shard=2": 2.2, "dp_shard=4": -2.3,
                         "pp=2,schedule=1f1b,m=4": -0.9},
    "layouts-shaped-2": {"tp=2": 1.0, "dp_replicate=2,dp_shard=2": 0.8, "dp_shard=4": -3.0,
                         "pp=2,schedule=1f1b,m=4": 1.0},
    "layouts-shaped-3": {"tp=2": -1.6, "dp_replicate=2,dp_shard=2": 1.2, "dp_shard=4": -3.4,
                         "pp=2,schedule=1f1b,m=4": 2.2},
    "layouts-shaped-4": {"tp=2": -3.6, "dp_replicate=2,dp_shard=2": -1.4, "dp_shard=4": -5.2,
                         "pp=2,schedule=1f1b,m=4": -5.5},
    # runs A and B of that note, three rounds each, pooled
    "layouts-shaped-5": {"tp=2": -2.1, "dp_replicate=2,dp_shard=2": -0.0, "dp_shard=4": -4.0,
                         "pp=2,schedule=1f1b,m=4": -1.6},
    "layouts-shaped-6": {"tp=2": -1.7, "dp_replicate=2,dp_shard=2": -0.4, "dp_shard=4": -4.7,
                         "pp=2,schedule=1f1b,m=4": -0.6},
    # run D (docs/lab/2026-12-07-layout-prediction-in-the-report.md), three rounds, the first with machine ids
    "layouts-shaped-7": {"tp=2": -1.7, "dp_replicate=2,dp_shard=2": -1.6, "dp_shard=4": -5.0,
                         "pp=2,schedule=1f1b,m=4": -2.7},
}


@pytest.mark.parametrize("store", STORES, ids=lambda p: p.stem)
def test_each_store_gives_the_errors_its_lab_note_quotes(store):
    cells, sweeps = script.cells_of(store)
    got = {r["layout"]: round(r["error_points"], 1) for r in script.compare(cells, sweeps, cores=2)}
    assert got == QUOTED[store.stem]


@pytest.mark.parametrize("store", STORES, ids=lambda p: p.stem)
def test_every_two_node_layout_is_predicted_from_its_one_node_twin(store):
    cells, sweeps = script.cells_of(store)
    rows = script.compare(cells, sweeps, cores=2)
    assert {r["layout"] for r in rows} == LAYOUTS
    for r in rows:
        assert r["predicted_efficiency"] is not None and r["twin_cell_id"] != r["cell_id"]
        # The link only costs: each 2-node layout is predicted below its twin on the loopback.
        assert r["predicted_efficiency"] < r["twin_efficiency"]


@pytest.mark.parametrize("store", STORES[:1], ids=lambda p: p.stem)
def test_with_the_link_as_fast_as_the_loopback_the_prediction_is_the_twin(store):
    cells, sweeps = script.cells_of(store)
    loopback = [r for r in sweeps if int(r["nodes"]) == 1]
    rows = script.compare(cells, loopback + [{**r, "nodes": 2} for r in loopback], cores=2)
    same = [r for r in rows if r["twin_layout"] == r["layout"]]  # tp and pp: their own layout on one node
    assert {r["layout"] for r in same} == {"tp=2", "pp=2,schedule=1f1b,m=4"}
    for r in same:
        assert r["predicted_efficiency"] == pytest.approx(r["twin_efficiency"], rel=1e-6)


def test_bad_arguments_get_one_line_and_exit_2(tmp_path):
    for args, says in ((["--rate", "0mbit"], "is not a positive tc rate"), (["--rounds", "0"], "at least 1"),
                       (["--from", str(tmp_path / "none.db")], "no such store")):
        done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "layout_prediction_shaped.py"), *args],
                              capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and says in done.stderr
    assert not list(tmp_path.iterdir())


def test_the_documented_comparison_runs_as_written_and_prints_the_docs_figures():
    line = ".venv/bin/python benchmarks/layout_prediction_shaped.py --from benchmarks/results/layouts-shaped-1.db"
    guide = (ROOT / "docs" / "layouts.md").read_text()
    assert line in guide
    done = subprocess.run([sys.executable, *line.split()[1:]], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    # The errors docs/lab/2026-12-07-pipeline-tied-embedding.md quotes for this store (run 2) under today's model.
    for layout, error in (("tp=2", "-1.0"), ("dp_replicate=2,dp_shard=2", "+2.2"), ("dp_shard=4", "-2.3"),
                          ("pp=2,schedule=1f1b,m=4", "-0.9")):
        row = next(r for r in done.stdout.splitlines() if r.startswith(f"| `{layout}`"))
        assert f"| {error} |" in row, row


def test_the_documented_comparison_piped_into_head_ends_without_a_traceback():
    line = ".venv/bin/python benchmarks/layout_prediction_shaped.py --from benchmarks/results/layouts-shaped-1.db"
    # head -c 0 has closed the pipe before the script (a second of imports) writes: its write meets a closed reader
    done = subprocess.run(f"{sys.executable} {' '.join(line.split()[1:])} | head -c 0", shell=True,
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.stdout == "" and done.stderr == "", done.stderr


def merged(tmp_path, stores):
    """One store holding the records, runs and sweeps of `stores` (same matrix, same cell ids): as if each were one
    round of one run of the script."""
    out = tmp_path / "rounds.db"
    shutil.copy(stores[0], out)
    db = sqlite3.connect(out)
    for other in stores[1:]:
        db.execute("ATTACH DATABASE ? AS other", (str(other),))
        for table in ("runs", "records", "collectives"):
            db.execute(f"INSERT INTO {table} SELECT * FROM other.{table}")
        db.commit()
        db.execute("DETACH DATABASE other")
    db.close()
    return out


def test_the_later_rounds_measure_the_first_rounds_training_cells(tmp_path):
    """--rounds: rounds after the first rerun matrix-fabric-layouts.yaml's training cells, same ids, no sweep."""
    full = {cell_id(c) for c in load_matrix(script.MATRIX).cells() if c["model"] not in COLLECTIVES}
    later = load_matrix(training_matrix(tmp_path, script.MATRIX)).cells()
    assert len(full) == 8 and {cell_id(c) for c in later} == full


@pytest.mark.parametrize("store", STORES[4:], ids=lambda p: p.stem)
def test_a_store_of_three_rounds_gives_each_rounds_figures_as_the_lab_note_quotes(store):
    """Runs A and B (docs/lab/2026-12-07-pipeline-tied-embedding.md) and D: three rounds each, in the order they
    started, and the pipeline's E round by round as the notes quote it."""
    assert len(script.run_ids(store)) == 3
    cells, sweeps = script.cells_of(store)
    rows = script.with_rounds(script.compare(cells, sweeps, cores=2), store, sweeps, cores=2)
    pp = next(r for r in rows if r["layout"] == "pp=2,schedule=1f1b,m=4")
    quoted = {"layouts-shaped-5": [31.3, 36.5, 26.2], "layouts-shaped-6": [24.5, 29.2, 28.5],
              "layouts-shaped-7": [30.3, 30.7, 29.9]}[store.stem]
    assert [round(100 * e, 1) for e in pp["round_efficiencies"]] == quoted


def test_each_round_is_compared_with_its_own_one_rank_cell_and_twins(tmp_path):
    """Two runs' stores as two rounds: each round's measured E is that run's own, in the order the runs started, and
    the pooled measured E (every round's windows) lies between them."""
    rounds = STORES[2:4]  # one round each
    store = merged(tmp_path, rounds)
    cells, sweeps = script.cells_of(store)
    rows = script.with_rounds(script.compare(cells, sweeps, cores=2), store, sweeps, cores=2)
    own = []
    for one in rounds:
        c, s = script.cells_of(one)
        own.append({r["layout"]: r["measured_efficiency"] for r in script.compare(c, s, cores=2)})
    assert {r["layout"] for r in rows} == LAYOUTS
    for r in rows:
        assert r["round_efficiencies"] == pytest.approx([o[r["layout"]] for o in own], rel=1e-9)
        assert len(r["round_errors"]) == 2 and all(e is not None for e in r["round_errors"])
        assert min(r["round_efficiencies"]) <= r["measured_efficiency"] <= max(r["round_efficiencies"])
    text = script.markdown(rows)
    pp = next(line for line in text.splitlines() if line.startswith("| `pp=2"))
    assert "24.2%" in pp and "33.4%" in pp  # runs 4 and 5's pipeline E (docs/lab/2026-12-06-pipeline-exchange.md)
    # One run alone is one round: nothing per round to show.
    cells, sweeps = script.cells_of(rounds[0])
    single = script.with_rounds(script.compare(cells, sweeps, cores=2), rounds[0], sweeps, cores=2)
    assert all(r["round_efficiencies"] == [] for r in single)
