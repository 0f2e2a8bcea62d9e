"""The lines several verbs print, in one place, so that no verb imports another: what changed between two
environments, each multi-worker cell's expected value with the compute probes it rests on (read from beside the
store), and the MFU and energy lines of GPU cells. Cells are named with bench.cells.label.cell_label everywhere.
Light at the top, like the verbs: what each function needs it imports when called."""
from __future__ import annotations


def what_changed(base_env: dict[str, str] | None, cand_env: dict[str, str] | None, show: bool = True):
    """Prints (unless not `show`: stdout holds a document) and returns what differs between the two sides' recorded
    environments (CheckSide.environment), most relevant first."""
    from bench.analysis.envdiff import diff_environments

    if base_env is None or cand_env is None:
        if show:
            print("what changed: not known (a baseline file saved before format 2 records no environment; save it "
                  "again with `bench baseline save`, or compare two runs in the store)")
        return []
    changes = diff_environments(base_env, cand_env)
    if show:
        print_changes(changes, "the baseline", "the candidate")
    return changes


def print_changes(changes, before: str, after: str) -> None:
    if not changes:
        print(f"what changed: nothing recorded differs between the environments of {before} and {after}")
        return
    print(f"what changed from {before} to {after} (most likely to move throughput first):")
    for c in changes[:40]:
        print(f"  {c.line()}")
    if len(changes) > 40:
        print(f"  ... {len(changes) - 40} more")


def probe_entries(store_path) -> dict[str, list[dict]]:
    """The compute probes stored next to the store and what co-located cells measured beyond them
    (bench/backends/local/compute_probe.py), and the engine probes (engine_probe.py): {"entries": [...],
    "costs": [...], "engines": [...]}, empty lists when there are none."""
    from pathlib import Path

    from bench.backends.local import engine_probe
    from bench.backends.local.compute_probe import cache_path, read

    results = Path(store_path).parent
    return {**read(cache_path(results)), "engines": read(engine_probe.cache_path(results))["entries"]}


def expected_lines(records, collectives, ranks, probes: dict[str, list[dict]] | None = None) -> list[str]:
    """One line per multi-worker cell (expected value, verdict, slow rank), one per compute probe that co-located
    cells rest on (`probes`: probe_entries() of the store; None = not looked up) and one per cell with a breakdown."""
    from bench.analysis.judged import judge
    from bench.launch import analysis_facts

    judged = judge(records, collectives, ranks, probes, flavours=analysis_facts())
    return [line for _, line in expected_entries(judged)]


def expected_entries(judged) -> list[tuple[tuple[str, ...], str]]:
    """expected_lines' lines, each with the cells it is about (a probe's line names every cell it serves), from
    bench.analysis.judged.judge() (None: no complete training cell, no lines)."""
    import time

    from bench.analysis.breakdown import breakdowns
    from bench.analysis.outside import beside_cell
    from bench.analysis.probe import engine_words
    from bench.cells.label import cell_label
    from bench.cells.units import IMAGES, unit_of_cell

    if judged is None:
        return []
    table, windows, found, expected = judged.table, judged.windows, judged.found, judged.expected
    labels = {r["cell_id"]: cell_label(r) for r in table.to_dict("records")}
    units = {r["cell_id"]: unit_of_cell(r) or IMAGES for r in table.to_dict("records")}
    out = [((e.cell_id,), f"  {e.cell_id}  {labels[e.cell_id]}: {e.describe(units[e.cell_id])}") for e in expected]
    for r in table.to_dict("records"):  # cells with no expected value (one worker): still say what was beside them
        if int(r["gpus"]) < 2 and (b := beside_cell(windows.get(r["cell_id"], []))) is not None and b.slowing:
            out.append(((r["cell_id"],), f"  {r['cell_id']}  {labels[r['cell_id']]}: beside it: {b.describe()}"))
    by_probe: dict[tuple, list[str]] = {}
    for cell_id, p in (found or {}).items():
        by_probe.setdefault((p.measured_unix, p.describe(units.get(cell_id, IMAGES)), p.seconds), []).append(cell_id)
    for (measured_unix, text, seconds), cells in by_probe.items():  # one line per probe, naming the cells it serves
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(measured_unix))
        out.append((tuple(cells),
                    f"  compute probe for {', '.join(cells)}: {text}; measured {when} in {seconds:.0f} s"))
    engines: dict[tuple, list[str]] = {}
    for e in expected:
        if e.engine_probe is not None:
            p = e.engine_probe
            engines.setdefault((p.measured_unix, engine_words(p, units[e.cell_id]), p.seconds), []).append(e.cell_id)
    for (measured_unix, text, seconds), cells in engines.items():
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(measured_unix))
        out.append((tuple(cells),
                    f"  engine probe for {', '.join(cells)}: {text}; measured {when} in {seconds:.0f} s"))
    for b in breakdowns(table, windows, judged.fits, found, flavours=judged.flavours):
        parts = ", ".join(f"{p} {s:.3f}" + (" (modelled)" if b.sources[p] == "modelled" else "")
                          for p, s in b.parts.items())
        out.append(((b.cell_id,), f"  {b.cell_id}  {labels[b.cell_id]}: step {b.step_s:.3f} s: {parts}"))
    return out


def mfu_lines(records) -> list[str]:
    """mfu_entries' lines."""
    return [line for _, line in mfu_entries(records)]


def mfu_entries(records) -> list[tuple[tuple[str, ...], str]]:
    """One line per GPU cell of the latest complete runs: its rate per GPU, MFU (or why none) with the peak and the
    FLOPs it rests on, and the mean watts per GPU and joules per image its workers sampled (bench/analysis/mfu.py).
    `records`: the store's rows, with mean_watts_per_gpu and joules_per_image where they were read. Each line with
    the cell it is about, as expected_entries gives them."""
    from bench.analysis.collectives import training_only
    from bench.analysis.mfu import cell_sm_clock, with_cell_power, with_mfu
    from bench.analysis.missing import is_missing, text
    from bench.analysis.scaling import cell_summary, latest_complete, split_imported
    from bench.cells.label import cell_label
    from bench.cells.units import IMAGES, format_rate, unit_of_cell

    measured = split_imported(records)[0]
    if measured.empty:
        return []
    ok = training_only(latest_complete(measured))
    ok = ok[ok["gpu"] != "cpu"]
    if ok.empty:
        return []
    table = with_cell_power(with_mfu(cell_summary(ok)), ok)
    clocks = cell_sm_clock(ok)
    out = []
    for r in table.to_dict("records"):
        clock = f", SM {clocks[r['cell_id']]:,.0f} MHz" if r["cell_id"] in clocks else ""
        unit = unit_of_cell(r) or IMAGES
        # Per sample in the cell's own words: an image, or a sequence of seq_len tokens (the worker's power record
        # divides the window's energy by its samples, whatever they are).
        per = "img" if unit == IMAGES else unit.sample
        if is_missing(r["mfu"]):
            figure = f"no MFU ({text(r['mfu_why'])})"
        else:
            figure = (f"MFU {100 * r['mfu']:.1f}% ({r['peak_format']} peak {r['peak_tflops']:,.1f} TFLOP/s, "
                      f"{r['flops_per_sample'] / 1e9:,.2f} GFLOP/{per})")
        line = (f"  {r['cell_id']}  {cell_label(r)}: {format_rate(r['samples_per_sec_per_gpu'], unit)} per GPU, "
                f"{figure}, {text(r['mean_watts_per_gpu'], '{:,.0f} W/GPU', 'power not sampled')}, "
                f"{text(r['joules_per_image'], '{:.3f} J/' + per, 'energy not sampled')}{clock}")
        out.append(((r["cell_id"],), line))
    return out
