"""The step settings (issue 33): `loader`, `compile`, `optimizer_impl`, `cuda_graphs`. Cell keys that move no earlier
cell's id, shown in the label when not default, selectable, in the store (migration 10) and the record, rendered as
explicit worker flags and refused alike by the plan and the worker; and the PyTorch worker's step under each, run for
real on a CPU (SGD's kernels, torch.compile) or, for CUDA graphs, with stand-ins for torch.cuda."""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from types import SimpleNamespace

import pandas as pd
import pytest
import torch

from bench.backends.shared.cell_launch import worker_program
from bench.cells.label import cell_label
from bench.cells.selection import matches, parse_selection
from bench.core.errors import BenchInputError
from bench.planning.cell import ID_ADDED_KEY_DEFAULTS, PlannedCell, cell_id, cell_id_text
from bench.planning.matrix import load_matrix, load_matrix_text
from bench.planning.plan import plan_cells
from bench.records.schema import parse_record
from bench.store import MIGRATIONS, STORE_SCHEMA_VERSION, Store
from models.gpu.plan import ComputePlan, DevicePlan
from models.measure.common import parse_args, single_process_comm
from models.workloads.resnet50 import step_settings
from models.workloads.resnet50.step_settings import (LoaderError, StaticBatch, by_shape, graph_forward_backward,
                                                     graph_scope, graph_whole_step, resolve_loader, sgd_kernel,
                                                     sgd_options, whole_step)
from tests.conftest import ROOT
from tests.factories import record

STEP_KEYS = {"loader": "auto", "compile": "off", "optimizer_impl": "default", "cuda_graphs": False}
OTHER_VALUES = [("loader", "pil"), ("loader", "nvjpeg"), ("loader", "dali"), ("compile", "default"),
                ("compile", "reduce-overhead"), ("compile", "max-autotune"), ("optimizer_impl", "foreach"),
                ("optimizer_impl", "fused"), ("cuda_graphs", True)]

# Cell ids made by the bench of commit 3b080bb, before these keys existed (its tree from `git archive`, the same
# matrices): CPU fallback cells and GPU cells of matrix.yaml, and matrix-gpu.yaml's cells it keeps: the headline
# docs/gpu-results.md measured on the H200 (87f3f262f3d7) and its H100 twin, and bf16.
OLD_IDS = {
    "matrix.yaml": {
        "6ecc21dcad97": "cpu/pytorch/gloo/ib=off/1w fp32 b16 64px nchw t1 3+8x5",
        "01a9243bf676": "cpu/pytorch/gloo/ib=off/2w fp32 b16 64px nchw t1 3+8x5",
        "8cbf21228258": "cpu/pytorch/openmpi/ib=off/1w fp32 b16 64px nchw t1 3+8x5",
        "7bc2085e44e0": "cpu/pytorch/openmpi/ib=off/2w fp32 b16 64px nchw t1 3+8x5",
        "0e52593f987e": "P100/pytorch/gloo/ib=on/1w bf16",
        "36d950bd19ee": "H100/tensorflow/gloo/ib=on/32w/4n fp32",
        "ebeedbb5cc89": "H100/pytorch/intelmpi/ib=off/32w/4n fp32",
        "a6935edca83f": "V100/tensorflow/mpich/ib=on/2w fp32",
    },
    "matrix-gpu.yaml": {
        "87f3f262f3d7": "H200/pytorch/gloo/ib=off/1w fp16 b256 20+50x3",
        "1a1ebe9f1658": "H100/pytorch/gloo/ib=off/1w fp16 b256 20+50x3",
        "59d549427448": "H100/pytorch/gloo/ib=off/1w bf16 b256 20+50x3",
    },
}


def _cell(**over):
    return {**load_matrix_text("name: t\naxes: {gpu: [cpu]}\n").cells()[0], **over}


def _plan(axes: str, workload: str = "{}", backend=None) -> list[PlannedCell]:
    return plan_cells(load_matrix_text(f"name: t\nworkload: {workload}\naxes: {axes}\n").cells(), backend)


# --- cell keys ----------------------------------------------------------------------------------------------------
def test_the_keys_are_cell_keys_at_defaults_that_keep_every_id():
    cell = _cell()
    assert {k: cell[k] for k in STEP_KEYS} == STEP_KEYS
    assert {k: ID_ADDED_KEY_DEFAULTS[k] for k in STEP_KEYS} == STEP_KEYS
    assert not any(f";{k}=" in cell_id_text(cell) for k in STEP_KEYS)  # at their defaults, not in the id's text


@pytest.mark.parametrize("matrix", sorted(OLD_IDS))
def test_ids_from_before_the_keys_stay_with_their_labels(matrix):
    cells = {cell_id(c): c for c in load_matrix(ROOT / matrix).cells()}
    for old_id, label in OLD_IDS[matrix].items():
        assert old_id in cells, f"{matrix}: {old_id} ({label}) is no longer planned"
        assert cell_label(cells[old_id]) == label


def test_each_other_value_gives_a_new_id_and_shows_in_the_label():
    base = _cell(gpu="H100", data="imagenet")
    ids, labels = {cell_id(base)}, {cell_label(base)}
    for key, value in OTHER_VALUES:
        cell = {**base, key: value}
        ids.add(cell_id(cell))
        labels.add(cell_label(cell))
        assert f"{key}={value};" in cell_id_text(cell) + ";"
    assert len(ids) == len(labels) == len(OTHER_VALUES) + 1
    label = cell_label({**base, "loader": "nvjpeg", "compile": "reduce-overhead", "optimizer_impl": "foreach"})
    assert label == "H100/pytorch/openmpi/ib=off/1w/imagenet-jpeg fp32 nvjpeg compile=reduce-overhead sgd-foreach"
    assert cell_label({**base, "cuda_graphs": True}).endswith(" cudagraphs")
    assert cell_label({**base, "cuda_graphs": 1, "loader": None}) == cell_label({**base, "cuda_graphs": True})


def test_the_matrix_checks_each_value_with_file_and_line():
    for bad, words in (("loader: nvjepg", "workload.loader: must be 'auto', 'pil', 'nvjpeg' or 'dali'"),
                       ("compile: off", "workload.compile: must be 'off', 'default'"),  # YAML's off is false
                       ("optimizer_impl: sgd", "workload.optimizer_impl:"),
                       ("cuda_graphs: 1", "workload.cuda_graphs: must be a valid boolean")):
        with pytest.raises(BenchInputError) as e:
            load_matrix_text(f"name: t\nworkload:\n  {bad}\naxes: {{gpu: [cpu]}}\n", "m.yaml")
        assert words in str(e.value) and "m.yaml:3" in str(e.value), str(e.value)
    with pytest.raises(BenchInputError, match=r"axes.compile\[1\]: must be"):
        load_matrix_text("name: t\naxes: {gpu: [cpu], compile: [default, fast]}\n")
    [cell] = load_matrix_text('name: t\nworkload: {compile: "off", cuda_graphs: false}\naxes: {gpu: [cpu]}\n').cells()
    assert cell_id(cell) == cell_id(_cell())


def test_the_plan_skips_what_cannot_run_with_one_reason_each():
    def reason(axes: str) -> str | None:
        [p] = _plan(axes)
        return p.reason

    assert reason("{gpu: [cpu], cuda_graphs: [true]}") == "cuda_graphs needs a GPU"
    assert reason("{gpu: [cpu], data: [imagenet], loader: [nvjpeg]}") == \
        "loader=nvjpeg needs a GPU (it decodes the JPEGs on the device)"
    assert reason("{gpu: [H100], framework: [tensorflow], data: [imagenet], loader: [dali]}") == \
        "loader=dali needs framework pytorch (the tensorflow workload decodes ImageNet its own way: loader=auto)"
    assert reason("{gpu: [H100], framework: [keras], compile: [default]}").startswith(
        "compile=default needs framework pytorch")
    assert reason("{gpu: [H100], framework: [tensorflow], optimizer_impl: [foreach]}").startswith(
        "optimizer_impl=foreach needs framework pytorch")
    assert reason("{gpu: [H100], framework: [keras], cuda_graphs: [true]}").startswith(
        "cuda_graphs=true needs framework pytorch")
    assert "torch.compile makes its own CUDA graphs" in reason(
        "{gpu: [H100], cuda_graphs: [true], compile: [reduce-overhead]}")
    # What runs: on a GPU, and synthetic cells with any loader (it is ignored there, as loader_workers is).
    for axes in ("{gpu: [H100], cuda_graphs: [true]}", "{gpu: [H100], data: [imagenet], loader: [nvjpeg, dali]}",
                 "{gpu: [cpu], compile: [default, max-autotune], optimizer_impl: [foreach, fused]}",
                 "{gpu: [cpu], loader: [nvjpeg, dali]}", "{gpu: [cpu], data: [imagenet], loader: [pil]}"):
        assert all(p.runnable for p in _plan(axes)), axes


def test_the_worker_gets_every_setting_as_a_flag_and_parses_it_back():
    [synthetic] = _plan("{gpu: [cpu], loader: [dali]}", "{compile: default, optimizer_impl: foreach}")
    argv = worker_program(synthetic, "r", None, 1)
    assert argv[argv.index("--compile") + 1] == "default" and argv[argv.index("--optimizer-impl") + 1] == "foreach"
    assert "--no-cuda-graphs" in argv and "--loader" not in argv  # synthetic: no input, no loader (nor its workers)
    [real] = _plan("{gpu: [H100], data: [imagenet], loader: [nvjpeg], cuda_graphs: [true]}")
    argv = worker_program(real, "r", None, 4, data_dir=ROOT)
    assert argv[argv.index("--loader") + 1] == "nvjpeg" and "--cuda-graphs" in argv
    args = parse_args("worker", [*argv[2:], "--no-hold-freed-memory"])
    assert (args.loader, args.compile, args.optimizer_impl, args.cuda_graphs) == ("nvjpeg", "off", "default", True)


def test_cells_are_selected_by_the_settings():
    sel = parse_selection("loader=pil|nvjpeg,compile=reduce-overhead,optimizer_impl=foreach,cuda_graphs=on")
    assert sel == {"loader": ["pil", "nvjpeg"], "compile": ["reduce-overhead"], "optimizer_impl": ["foreach"],
                   "cuda_graphs": [True]}
    frame = pd.DataFrame({"cuda_graphs": [1, 0, None], "compile": ["off", "default", None]})
    assert matches(frame, parse_selection("cuda_graphs=true")).tolist() == [True, False, False]
    assert matches(frame, parse_selection("cuda_graphs=off,compile=default")).tolist() == [False, True, False]
    with pytest.raises(BenchInputError, match="'cuda_graphs' takes true/false"):
        parse_selection("cuda_graphs=maybe")


# --- record and store -------------------------------------------------------------------------------------------
def test_the_record_carries_what_ran_and_the_store_keeps_both(tmp_path):
    cell = {"gpu": "H200", "data": "imagenet", "loader": "auto", "cuda_graphs": True}
    rec = parse_record({**record(**cell), "loader": "nvjpeg", "compile": "off", "optimizer_impl": "fused",
                        "cuda_graphs": "fwd+bwd"})
    with Store(tmp_path / "b.db") as store:
        store.write(rec)
        [row] = store.records()
        df = store.dataframe()
    assert (row["loader"], row["effective_loader"]) == ("auto", "nvjpeg")
    assert (row["optimizer_impl"], row["effective_optimizer_impl"]) == ("default", "fused")
    assert (row["cuda_graphs"], row["effective_cuda_graphs"], row["compile"]) == (1, "fwd+bwd", "off")
    assert df["cuda_graphs"].dtype == "boolean" and bool(df["cuda_graphs"][0])
    for field, bad in (("loader", "auto"), ("compile", "fast"), ("optimizer_impl", "default"),
                       ("cuda_graphs", "all")):
        with pytest.raises(BenchInputError, match=field):
            parse_record({**record(), field: bad})  # what ran is never `auto` or `default`: it is resolved


def test_what_changed_names_a_loader_that_resolved_otherwise():
    """The same cell (loader: auto) ran Pillow on one machine and nvJPEG on another: `history`'s what-changed says so;
    records from before the fields say nothing."""
    from bench.analysis.envdiff import diff_environments, environment_of

    before = environment_of([{"loader": "pil", "optimizer_impl": "fused"}])
    after = environment_of([{"loader": "nvjpeg", "optimizer_impl": "fused", "cuda_graphs": "fwd+bwd"}])
    assert [(c.what, c.before, c.after) for c in diff_environments(before, after)] == \
        [("workload loader (resolved)", "pil", "nvjpeg")]
    assert diff_environments(environment_of([{}]), after) == []


def _schema_9_store(path) -> dict:
    """A store as the bench before migration 10 made it, with one record."""
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
    for version in range(1, 10):
        conn.executescript(MIGRATIONS[version])
        conn.execute("INSERT INTO schema_version VALUES (?)", (version,))
    old = parse_record(record(run_id="old", repeats=1))
    # keys of migrations 10, 13, 14 and 15
    later = (*STEP_KEYS, "seq_len", "grad_accum", "activation_checkpointing", "layout", "tp_across_nodes")
    cell = {k: int(v) if isinstance(v, bool) else v for k, v in old.cell.items() if k not in later}
    conn.execute(f"INSERT INTO records (run_id, cell_id, repeat, status, {', '.join(cell)}, images_per_sec, "
                 f"record_json, written_unix) VALUES (?, ?, 0, 'ok', {', '.join('?' * len(cell))}, ?, ?, 0)",
                 (old.run_id, old.cell_id, *cell.values(), old.samples_per_sec, old.to_json()))
    conn.commit()
    conn.close()
    return {"cell_id": old.cell_id, **old.cell}


def test_migration_10_gives_old_rows_the_defaults_they_ran_with(tmp_path):
    assert STORE_SCHEMA_VERSION >= 10
    old = _schema_9_store(tmp_path / "old.db")
    with Store(tmp_path / "old.db") as store:
        assert store.schema_version == STORE_SCHEMA_VERSION and store.completed_cells() == {old["cell_id"]}
        [row] = store.records()
        assert {k: row[k] for k in STEP_KEYS} == {**STEP_KEYS, "cuda_graphs": 0}
        assert row["effective_loader"] is row["effective_optimizer_impl"] is row["effective_cuda_graphs"] is None
        df = store.dataframe()
        assert matches(df, parse_selection("loader=auto,compile=off,optimizer_impl=default,cuda_graphs=false")).all()
        assert cell_label(row) == cell_label(old)
        store.write(parse_record({**record(run_id="new", compile="default"), "compile": "default",
                                  "optimizer_impl": "foreach"}))
        rows = {r["run_id"]: r for r in store.records()}
    assert (rows["new"]["compile"], rows["new"]["effective_optimizer_impl"]) == ("default", "foreach")


def test_the_h200_store_opens_and_its_cells_are_still_matrix_gpus(tmp_path):
    """benchmarks/results/h200-resnet50.db, made at schema 9 (a copy: opening migrates it)."""
    path = tmp_path / "bench.db"
    shutil.copyfile(ROOT / "benchmarks" / "results" / "h200-resnet50.db", path)
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT MAX(version) FROM schema_version").fetchone() == (9,)
    planned = {cell_id(c) for c in load_matrix(ROOT / "matrix-gpu.yaml").cells()}
    with Store(path) as store:
        assert store.schema_version == STORE_SCHEMA_VERSION
        rows = store.records()
    assert {r["cell_id"] for r in rows} == {"87f3f262f3d7", "3d003c490430", "39614abc76c9", "46418efae21b"}
    for row in rows:
        assert (row["loader"], row["compile"], row["optimizer_impl"], row["cuda_graphs"]) == ("auto", "off",
                                                                                             "default", 0)
        cell = json.loads(row["record_json"])["cell"]
        assert cell_id(cell) == row["cell_id"] == cell_id({**cell, **STEP_KEYS})
    assert "87f3f262f3d7" in planned  # the headline: measured again under its id


# --- the SGD kernels ------------------------------------------------------------------------------------------------
def _tiny_net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                               torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 10))


def _train(model, optimizer, steps: int = 6):
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(8, 3, 16, 16, generator=gen), torch.randint(0, 10, (8,), generator=gen)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def test_each_sgd_kernel_makes_the_update_of_plain_sgd():
    assert {i: sgd_kernel(i) for i in ("default", "foreach", "fused")} == \
        {"default": "fused", "foreach": "foreach", "fused": "fused"}
    assert sgd_options("default") == {"fused": True} and sgd_options("foreach") == {"foreach": True}
    reference = _tiny_net()
    plain = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-5, foreach=False)
    ref_losses = _train(reference, plain)
    assert ref_losses[-1] < ref_losses[0] * 0.95  # it trains
    for impl in ("default", "foreach", "fused"):
        model = _tiny_net()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-5, **sgd_options(impl))
        assert optimizer.defaults["fused" if sgd_kernel(impl) == "fused" else "foreach"] is True
        losses = _train(model, optimizer)
        assert losses == pytest.approx(ref_losses, rel=1e-5), impl
        for a, b in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def _cpu_worker(engine=None, device: str = "cpu", scaler: bool = False):
    from models.workloads.resnet50.pytorch_worker import Worker

    return Worker(single_process_comm(), engine == "horovod" or None, engine == "native" or None, None, 0,
                  torch.device(device), torch.contiguous_format, torch.contiguous_format,
                  ComputePlan(None, scaler, False, False), DevicePlan(device == "cuda", None, False, False))


def _worker_args(**over):
    return SimpleNamespace(**{"num_classes": 10, "batch_size": 8, "image_size": 32, "optimizer_impl": "default",
                              "compile": "off", "cuda_graphs": False, **over})


@pytest.mark.slow
def test_the_workers_resnet50_steps_alike_with_each_sgd_kernel():
    """models/workloads/resnet50/pytorch_worker.py's own build_model and step, one thread, 32 px, batch 8: the same
    parameters after a few steps whichever kernel updates them, and the loss falls."""
    from models.workloads.resnet50.pytorch_worker import build_model, make_train_step, synthetic_batch

    torch.set_num_threads(1)
    params = {}
    for impl in ("default", "foreach", "fused"):
        args, w = _worker_args(optimizer_impl=impl), _cpu_worker()
        model, optimizer = build_model(args, torch, w)
        assert optimizer.defaults[sgd_kernel(impl)] is True
        step = make_train_step(args, torch, w, model, optimizer, synthetic_batch(args, torch, w))
        losses = [float(step()) for _ in range(4)]
        assert losses[-1] < losses[0] and step.cuda_graphs is None
        params[impl] = [p.detach().clone() for p in model.parameters()]
    for impl in ("foreach", "fused"):
        for a, b in zip(params[impl], params["default"]):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


# --- torch.compile ------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_compiled_model_trains_through_the_workers_own_build_and_step(monkeypatch):
    """build_model with compile=default (torch.compile with Inductor, g++ here) around a tiny model in ResNet-50's
    place: the step runs compiled, the loss falls, and the parameters follow the eager run's."""
    import models.workloads.resnet50.model_torch
    from models.workloads.resnet50.pytorch_worker import build_model, make_train_step, synthetic_batch

    monkeypatch.setattr(models.workloads.resnet50.model_torch, "ResNet50", lambda num_classes: _tiny_net())
    torch.set_num_threads(1)
    runs = {}
    for mode in ("off", "default"):
        args, w = _worker_args(compile=mode), _cpu_worker()
        model, optimizer = build_model(args, torch, w)
        assert isinstance(model, torch._dynamo.eval_frame.OptimizedModule) == (mode != "off")
        step = make_train_step(args, torch, w, model, optimizer, synthetic_batch(args, torch, w))
        runs[mode] = [float(step()) for _ in range(5)]
    assert runs["default"][-1] < runs["default"][0]  # it trains (the worker's lr at batch 8 is small)
    assert runs["default"] == pytest.approx(runs["off"], rel=1e-3)


# --- CUDA graphs ----------------------------------------------------------------------------------------------------
def test_what_cuda_graphs_capture_per_engine_and_precision():
    assert graph_scope(False, True, "native", False) is None
    assert graph_scope(True, False, "none", False) is None  # a CPU: nothing (the plan refuses the cell anyway)
    assert graph_scope(True, True, "horovod", False) == "fwd+bwd"  # Horovod's background thread allreduces
    assert graph_scope(True, True, "horovod", True) == "fwd+bwd"
    assert graph_scope(True, True, "native", True) == "fwd+bwd"  # fp16's GradScaler syncs with the host
    assert graph_scope(True, True, "native", False) == "step"  # DDP's allreduce is on this thread's stream
    assert graph_scope(True, True, "none", False) == "step"
    assert step_settings.graph_warmup("native") == 11 and step_settings.graph_warmup("none") == 3


def test_static_batch_buffers_take_each_batch_in_place():
    x = torch.randn(4, 3, 8, 8).contiguous(memory_format=torch.channels_last)
    y = torch.arange(4)
    static = StaticBatch((x, y))
    sx, sy = static.tensors
    assert sx.data_ptr() != x.data_ptr() and sx.is_contiguous(memory_format=torch.channels_last)
    ptrs = (sx.data_ptr(), sy.data_ptr())
    new = (torch.randn(4, 3, 8, 8), torch.tensor([3, 2, 1, 0]))
    assert static.fits(new) and static.load(new) is static.tensors
    assert (sx.data_ptr(), sy.data_ptr()) == ptrs  # the addresses a graph captured stay
    assert torch.equal(sx, new[0]) and torch.equal(sy, new[1])
    assert sx.is_contiguous(memory_format=torch.channels_last)  # copied into the captured layout
    assert not static.fits((torch.randn(3, 3, 8, 8), torch.arange(3)))  # a short batch
    assert not static.fits((torch.randn(4, 3, 8, 8).half(), y))


def test_a_graphed_step_replays_full_batches_and_runs_others_eagerly():
    calls = []
    static = StaticBatch((torch.zeros(2, 3), torch.zeros(2, dtype=torch.long)))
    step = whole_step(lambda: calls.append("replay") or "loss", lambda b: calls.append(("eager", len(b[1]))) or "e",
                      static)
    assert step() == "loss" and step((torch.ones(2, 3), torch.ones(2, dtype=torch.long))) == "loss"
    assert torch.equal(static.tensors[0], torch.ones(2, 3))
    assert step((torch.ones(1, 3), torch.ones(1, dtype=torch.long))) == "e"
    assert calls == ["replay", "replay", ("eager", 1)]
    forward = by_shape((2, 3), lambda x: "graphed", lambda x: "eager")
    assert forward(torch.zeros(2, 3)) == "graphed" and forward(torch.zeros(1, 3)) == "eager"


class _FakeCuda:
    """torch.cuda's capture API, recording what the worker asks of it (no GPU here)."""

    def __init__(self):
        self.log, self.capturing = [], False
        fake = self

        class Graph:
            def replay(self):
                fake.log.append("replay")

        class Capture:
            def __init__(self, graph, pool=None):
                pass

            def __enter__(self):
                fake.capturing = True
                fake.log.append("capture")

            def __exit__(self, *exc):
                fake.capturing = False

        self.CUDAGraph, self.graph = Graph, Capture
        self.Stream = lambda: SimpleNamespace(wait_stream=lambda other: fake.log.append("side waits"))
        self.current_stream = lambda: SimpleNamespace(wait_stream=lambda other: fake.log.append("main waits"))
        self.stream = lambda s: _Quiet()

    def make_graphed_callables(self, module, sample_args):
        self.log.append(("graphed", module, tuple(a.shape for a in sample_args)))
        module.forward = lambda x: ("graphed forward", x)
        return module


class _Quiet:
    def __enter__(self):
        pass

    def __exit__(self, *exc):
        pass


def test_the_whole_step_is_captured_after_its_warmup_and_replayed():
    cuda = _FakeCuda()
    fake_torch = SimpleNamespace(cuda=cuda)
    static = StaticBatch((torch.zeros(2), torch.zeros(2)))
    seen = []

    def body(batch):
        seen.append(("body", cuda.capturing, batch is static.tensors))
        return "static loss"

    replay = graph_whole_step(fake_torch, body, lambda: seen.append("zero_grad"), static, warmup=3)
    assert seen == ["zero_grad", ("body", False, True)] * 3 + ["zero_grad", ("body", True, True)]
    assert cuda.log == ["side waits", "main waits", "capture"]
    assert replay() == "static loss" and cuda.log[-1] == "replay"


def test_ddp_for_a_whole_step_capture_is_built_on_a_side_stream_between_waits():
    cuda = _FakeCuda()
    made = step_settings.on_side_stream(SimpleNamespace(cuda=cuda), lambda: cuda.log.append("DDP") or "ddp")
    assert made == "ddp" and cuda.log == ["side waits", "DDP", "main waits"]


def test_forward_and_backward_are_graphed_for_the_captured_shape_only():
    cuda = _FakeCuda()
    module = torch.nn.Linear(3, 2)
    graph_forward_backward(SimpleNamespace(cuda=cuda), module, torch.zeros(4, 3))
    assert cuda.log == [("graphed", module, ((4, 3),))]
    assert module(torch.ones(4, 3))[0] == "graphed forward"
    assert module(torch.ones(1, 3)).shape == (1, 2)  # eager: the module's own forward


@pytest.mark.parametrize("engine,scaler,captured", [(None, False, "step"), ("native", False, "step"),
                                                    ("horovod", False, "fwd+bwd"), ("native", True, "fwd+bwd")])
def test_the_worker_captures_only_on_a_gpu_and_as_much_as_its_engine_allows(monkeypatch, engine, scaler, captured):
    import models.workloads.resnet50.pytorch_worker as worker

    calls = []
    monkeypatch.setattr(worker, "graph_forward_backward", lambda torch_, module, x, autocast: calls.append(
        ("fwd+bwd", module, tuple(x.shape))))
    monkeypatch.setattr(worker, "graph_whole_step", lambda torch_, body, zero_grad, static, warmup: calls.append(
        ("step", warmup)) or (lambda: "replayed"))
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 10))
    wrapped = SimpleNamespace(module=model) if engine == "native" else model  # DDP's wrapper, as far as this goes
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batch = (torch.randn(2, 3, 2, 2), torch.tensor([1, 2]))
    # A CPU worker asked for graphs captures nothing (and the plan never launches such a cell).
    step = worker.make_train_step(_worker_args(cuda_graphs=True), torch, _cpu_worker(engine, scaler=False), model,
                                  optimizer, batch)
    assert calls == [] and step.cuda_graphs is None
    if scaler:
        monkeypatch.setattr(torch.amp, "GradScaler", lambda device: "a scaler")  # CUDA's, which a CPU build lacks
    step = worker.make_train_step(_worker_args(cuda_graphs=True), torch, _cpu_worker(engine, "cuda", scaler),
                                  wrapped, optimizer, batch)
    assert step.cuda_graphs == captured
    if captured == "fwd+bwd":
        assert calls == [("fwd+bwd", model, (2, 3, 2, 2))]  # the model inside DDP's wrapper
    else:
        assert calls == [("step", 11 if engine == "native" else 3)] and step() == "replayed"


# --- the loader -----------------------------------------------------------------------------------------------------
def test_auto_resolves_to_what_this_tree_and_device_have():
    assert resolve_loader("auto", "cpu") == resolve_loader("pil", "cuda") == "pil"  # no GPU loaders module: Pillow
    with pytest.raises(LoaderError, match="loader=nvjpeg: this worker has no GPU JPEG decoders"):
        resolve_loader("nvjpeg", "cuda")
    told = []
    fake = SimpleNamespace(resolve_loader=lambda requested, device: told.append((requested, device)) or "dali")
    assert resolve_loader("auto", "cuda", fake) == "dali" and told == [("auto", "cuda")]
    loaders = step_settings.gpu_loaders()
    if loaders is not None:  # models/data/loaders.py, where this tree has it
        assert resolve_loader("auto", "cpu", loaders) == "pil"


@pytest.mark.workload
def test_a_real_data_cpu_worker_records_the_loader_and_kernel_that_ran(tmp_path):
    """The PyTorch worker on the generated JPEG sample with loader auto and foreach SGD, one window: its record says
    Pillow ran (auto on a CPU), the foreach kernel, no compile, no graphs; bench's record schema takes it."""
    from bench.execution.datasets import make_imagenet_sample

    make_imagenet_sample(tmp_path / "inet", classes=2, per_class=8, tfrecord=False)
    [planned] = _plan("{gpu: [cpu], data: [imagenet]}", "{batch_per_gpu: 4, image_size: 32, warmup_steps: 1, "
                      "steps: 2, repeats: 1, threads: 1, loader_workers: 1, optimizer_impl: foreach}")
    argv = worker_program(planned, "r", tmp_path / "out.jsonl", 1, sys.executable, data_dir=tmp_path / "inet")
    done = subprocess.run([*argv, "--num-classes", "10", "--no-hold-freed-memory"], capture_output=True, text=True,
                          timeout=600, cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    [line] = (tmp_path / "out.jsonl").read_text().splitlines()
    data = json.loads(line)
    assert (data["loader"], data["optimizer_impl"], data["compile"], data["cuda_graphs"]) == \
        ("pil", "foreach", "off", None)
    rec = parse_record({**data, "cell": planned.cell})
    assert rec.loader == "pil" and rec.loader_workers == 1
