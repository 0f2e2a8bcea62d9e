"""The workload as an axis (issue 47): a matrix's `model` names ResNet-50, a transformer configuration or shape id,
or a collective; each cell speaks its own unit; the store's generic rate; ResNet-50's ids and argv unchanged."""
import json

import pytest

from bench.analysis import AnalysisError
from bench.backends.shared.cell_launch import worker_program
from bench.cells.label import cell_label, framework_words
from bench.cells.units import IMAGES, format_rate, image_rows, other_rows, unit_of_cell
from bench.core.errors import BenchInputError
from bench.planning.cell import cell_id, cell_id_text
from bench.planning.matrix import load_matrix
from bench.planning.plan import plan_cells
from bench.records.schema import parse_record
from models.registry.rules import workload_refusal
from models.workloads.transformer.shapes import CONFIGS, shape_id
from tests.factories import cell, record

MATRIX = """
name: t
workload: {{model: {model}, batch_per_gpu: 4, seq_len: 128, warmup_steps: 1, steps: 2, repeats: 2, threads: 1}}
axes:
  gpu: [cpu]
  mpi: [gloo]
  gpus: [2]
  engine: [horovod, native, fsdp2]
"""


def _plan(write_matrix, model="tiny", text=MATRIX):
    return plan_cells(load_matrix(write_matrix(text.format(model=model))).cells(), None)


def test_a_transformer_cell_is_planned_under_each_engine(write_matrix):
    plan = _plan(write_matrix)
    assert [p.status for p in plan] == ["planned"] * 3, [p.reason for p in plan]
    labels = [p.label() for p in plan]
    assert labels == ["cpu/tiny:pytorch/gloo/ib=off/2w fp32 b4 t1 T128 1+2x2",
                      "cpu/tiny:pytorch+ddp/gloo/ib=off/2w fp32 b4 t1 T128 1+2x2",
                      "cpu/tiny:pytorch+fsdp2/gloo/ib=off/2w fp32 b4 t1 T128 1+2x2"]
    assert len({p.cell_id for p in plan}) == 3


def test_a_shape_id_is_a_model_and_its_own_id(write_matrix):
    sid = shape_id(CONFIGS["tiny"])
    plan = _plan(write_matrix, sid)
    assert all(p.runnable for p in plan)
    assert plan[0].cell["model"] == sid and plan[0].cell_id != _plan(write_matrix)[0].cell_id


def test_an_unknown_model_is_one_line_naming_the_known_ones(write_matrix):
    with pytest.raises(BenchInputError) as e:
        load_matrix(write_matrix(MATRIX.format(model="gpt5-huge")))
    text = str(e.value)
    assert "gpt5-huge" in text and "gpt2-124m" in text and "resnet50" in text and "m.yaml" in text
    assert "\n" not in text


def test_fsdp2_is_refused_for_resnet50_with_the_workers_own_words():
    c = cell(engine="fsdp2")
    assert workload_refusal("pytorch", c, "cpu") == "engine=fsdp2: the pytorch workload runs under horovod, native only"
    assert workload_refusal("tensorflow", {**c, "model": "tiny", "engine": "horovod"}, "cpu") == \
        "model=tiny: the transformer runs under framework pytorch only"
    assert workload_refusal("pytorch", {**c, "model": "tiny", "data": "imagenet"}, "cpu").startswith(
        "data=imagenet: the transformer workload reads only synthetic")


def test_the_new_keys_at_their_defaults_move_no_resnet50_id():
    c = cell()
    before = cell_id_text({k: v for k, v in c.items() if k not in ("seq_len", "grad_accum",
                                                                      "activation_checkpointing", "layout",
                                                                      "tp_across_nodes")})
    assert cell_id_text({**c, "seq_len": None, "grad_accum": 1, "activation_checkpointing": False,
                         "layout": None, "tp_across_nodes": False}) == before
    assert cell_id({**c, "grad_accum": 2}) != cell_id(c)


def test_the_transformer_argv_names_every_setting_and_resnet50s_is_unchanged(write_matrix):
    planned = _plan(write_matrix)[2]
    argv = worker_program(planned, "r", "out.jsonl", 1, python="py", models_dir="/m")
    assert argv[:2] == ("py", "/m/workloads/transformer/pytorch_worker.py")
    flags = dict(zip(argv[2::2], argv[3::2]))
    assert flags["--model"] == "tiny" and flags["--engine"] == "fsdp2" and flags["--seq-len"] == "128"
    assert flags["--batch-size"] == "4" and flags["--grad-accum"] == "1" and "--image-size" not in argv
    resnet = _plan(write_matrix, "resnet50", MATRIX.replace("engine: [horovod, native, fsdp2]", "engine: [native]"))[0]
    rargv = worker_program(resnet, "r", "out.jsonl", 1, python="py", models_dir="/m")
    assert rargv[1] == "/m/workloads/resnet50/pytorch_worker.py"
    assert "--image-size" in rargv and "--seq-len" not in rargv


def test_units_by_workload():
    tiny = {"model": "tiny", "framework": "pytorch", "seq_len": None}
    assert unit_of_cell(tiny).rate == "tokens/s" and unit_of_cell(tiny).per_sample == CONFIGS["tiny"].seq
    assert unit_of_cell({**tiny, "seq_len": 64}).per_sample == 64
    assert unit_of_cell(cell()) == IMAGES and unit_of_cell({"model": "allreduce"}) is None
    assert format_rate(10.0, unit_of_cell({**tiny, "seq_len": 64})) == "640 tokens/s"
    assert format_rate(12.34, IMAGES) == "12.3 img/s"


def test_image_sections_never_see_a_token_row():
    import pandas as pd

    df = pd.DataFrame({"cell_id": ["a", "b", "c"], "rate_unit": ["img/s", "tokens/s", None]})
    assert image_rows(df)["cell_id"].tolist() == ["a", "c"] and other_rows(df)["cell_id"].tolist() == ["b"]


def test_engines_are_named_in_tables():
    assert framework_words("pytorch", "native") == "pytorch (DDP)"
    assert framework_words("pytorch", "fsdp2") == "pytorch (FSDP2)"
    assert framework_words("pytorch", "horovod") == "pytorch"
    label = cell_label({**cell(model="tiny", engine="fsdp2"), "grad_accum": 4, "activation_checkpointing": True,
                        "optimizer_impl": "foreach"})
    assert "tiny:pytorch+fsdp2" in label and "ga4" in label and "ckpt" in label and "adamw-foreach" in label


def test_a_token_rate_must_agree_with_the_sample_rate():
    doc = record()
    doc.update(sample_unit="sequence", tokens_per_sample=128, tokens_per_sec=doc["samples_per_sec"] * 128)
    assert parse_record(doc).tokens_per_sec == pytest.approx(doc["samples_per_sec"] * 128)
    doc["tokens_per_sec"] *= 1.5
    with pytest.raises(BenchInputError, match="tokens_per_sec .* != samples_per_sec x tokens_per_sample"):
        parse_record(doc)


def test_a_record_from_before_the_axis_names_its_rate_by_images_and_is_read_as_samples():
    """Records in stores and files from before (and image workers before this change) said images_per_sec."""
    def legacy(d):
        return {("images" + k[len("samples"):] if k.startswith("samples_per_sec") else k): v for k, v in d.items()}

    doc = legacy(record())
    doc["per_rank"] = [legacy(r) for r in doc["per_rank"]]
    assert "images_per_sec" in doc and "images_per_sec" in doc["per_rank"][0]
    parsed = parse_record(doc)
    assert parsed.samples_per_sec == doc["images_per_sec"]
    assert [r.samples_per_sec for r in parsed.per_rank] == [r["images_per_sec"] for r in doc["per_rank"]]
    stored = json.loads(parsed.to_json())  # what the store keeps: the generic name only
    assert "images_per_sec" not in stored and stored["samples_per_sec"] == doc["images_per_sec"]


def test_the_shipped_matrix_has_the_transformer_cells_of_make_run():
    from pathlib import Path

    cells = load_matrix(Path(__file__).resolve().parents[1] / "matrix.yaml").cells()
    tfm = [c for c in cells if c["model"] == "tiny"]
    # 7 data-parallel cells across the engines, and 3 parallel layouts (docs/layouts.md)
    assert len(tfm) == 10 and {c["engine"] for c in tfm} == {"horovod", "native", "fsdp2"}
    assert sum(c["layout"] is not None for c in tfm) == 3
    assert {c["mpi"] for c in tfm} == {"gloo", "openmpi"} and {c["gpus"] for c in tfm} == {1, 2, 4}


def test_a_gpt2_cell_longer_than_its_positions_is_skipped_with_the_reason(write_matrix):
    text = MATRIX.replace("seq_len: 128", "seq_len: 2048").replace("gpu: [cpu]", "gpu: [H100]")
    plan = _plan(write_matrix, "gpt2-124m", text)
    assert {p.reason for p in plan} == {"seq_len=2048: gpt2-124m has 1024 learned positions (GPT-2 style cannot "
                                        "train longer)"}


def test_the_what_if_model_reads_the_models_own_gradients_and_the_engines_traffic():
    from bench.analysis.traffic import gradients_of, samples_per_step, traffic_of
    from bench.analysis.whatif import predict
    from models.workloads.transformer.shapes import CONFIGS

    llama = {"model": "llama3-8b", "engine": "native", "seq_len": 4096, "batch_per_gpu": 2, "grad_accum": 4}
    assert sum(g.params for g in gradients_of(llama)) == CONFIGS["llama3-8b"].params()
    assert samples_per_step(llama) == 8 and traffic_of(llama) == 1.0 and traffic_of({"engine": "fsdp2"}) == 1.5
    args = ("H100", 16, 1.0, 8)
    ddp = predict(*args, gradients=gradients_of(llama), traffic=1.0)
    fsdp = predict(*args, gradients=gradients_of(llama), traffic=1.5)
    resnet = predict(*args)  # no gradients: ResNet-50's 25.6M parameters
    assert fsdp.comm_s == pytest.approx(1.5 * ddp.comm_s, rel=0.05) and ddp.comm_s > 100 * resnet.comm_s


def test_fsdp2s_forward_gathers_wait_before_each_unit_on_a_cpu_and_hide_behind_forward_on_a_gpu():
    from bench.analysis.traffic import forward_units, gradients_of, step_of
    from bench.analysis.whatif import BACKWARD_FRACTION, allreduce_s, gradient_bytes, predict

    gpt2 = {"model": "gpt2-124m", "engine": "fsdp2", "batch_per_gpu": 16}
    stream = gradients_of(gpt2)
    units = forward_units(stream)
    # The root (embeddings, final norm; the tied head is the embedding) then the 12 blocks, every parameter once.
    assert len(units) == 13 and sum(units) == CONFIGS["gpt2-124m"].params() and units[0] > units[1] == units[12]
    assert step_of(gpt2)["forward_traffic"] == 0.5 and step_of({**gpt2, "engine": "native"})["forward_traffic"] == 0
    # On GPUs, a forward pass longer than the gathers hides them: the same step as pricing all 1.5x in backward.
    long_forward = predict("H100", 16, 1.0, 8, gradients=stream, traffic=1.5, forward_traffic=0.5)
    assert long_forward.step_s == pytest.approx(predict("H100", 16, 1.0, 8, gradients=stream, traffic=1.0).step_s)
    # A short forward hides only its own length of them.
    short = predict("H100", 16, 10_000.0, 8, gradients=stream, traffic=1.5, forward_traffic=0.5)
    without = predict("H100", 16, 10_000.0, 8, gradients=stream, traffic=1.0)
    from bench.analysis.whatif import FABRICS, LINKS
    from bench.facts.catalog import catalog

    fab, per_node = FABRICS["H100"], catalog()["H100"].gpus_per_vm
    gathers = sum(allreduce_s(16, per_node, 0.5 * gradient_bytes("fp32", n), LINKS[fab["intra"]], LINKS[fab["ib"]],
                              "nccl", LINKS["host-stage-vm"]) for n in units)
    assert short.step_s - without.step_s == pytest.approx(gathers - (1 - BACKWARD_FRACTION) * short.compute_s)
    with pytest.raises(AnalysisError):
        predict("H100", 16, 1.0, 8, gradients=stream, traffic=1.5, forward_traffic=1.5)


def test_a_transformers_gradient_stream_adds_up_and_runs_in_backward_order():
    from models.workloads.gradients import transformer_gradients

    for name, shape in CONFIGS.items():
        stream = transformer_gradients(shape)
        assert sum(g.params for g in stream) == shape.params(), name
        ready = [g.ready_fraction for g in stream]
        assert ready == sorted(ready) and 0 < ready[0] and ready[-1] == 1.0, name
