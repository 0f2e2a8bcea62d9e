"""benchmarks/timeline_ops.py: fused tensors (overlapping spans) are one operation; a quiet gap starts a new step."""
from benchmarks.timeline_ops import operation_spans, per_step


def span(pid, name, start, end):
    return [{"ph": "B", "name": name, "ts": start, "pid": pid}, {"ph": "E", "ts": end, "pid": pid}]


def test_overlapping_tensor_spans_are_one_operation_and_a_gap_starts_a_step():
    events = (span(1, "NEGOTIATE_ALLREDUCE", 0, 50) + span(1, "GLOO_ALLREDUCE", 100, 900)
              + span(2, "GLOO_ALLREDUCE", 130, 910)  # fused with pid 1's: starts 30 µs later
              + span(3, "GLOO_ALLREDUCE", 2000, 2500)
              + span(4, "GLOO_ALLREDUCE", 1_000_000, 1_000_400))  # a second later: the next step
    spans = operation_spans(events)
    assert spans == [(100, 910), (2000, 2500), (1_000_000, 1_000_400)]
    steps = per_step(spans, gap_s=0.3)
    assert [len(s) for s in steps] == [2, 1]
