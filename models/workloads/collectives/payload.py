"""What each rank sends in a collective sweep, and what every rank must hold afterwards, from the formula alone.

Rank r's data has element i = (r + 1) + (i mod 7). Allreduce: the sum over n ranks is n(n+1)/2 + n(i mod 7).
Allgather: slice r of the output holds rank r's data. Broadcast: every rank ends with rank 0's data, 1 + (i mod 7).
Sendrecv: rank r ends with rank r − 1's data (mod n).
All exact in float32, computed from the formula, never from what a rank sent. Imports no framework: the worker passes
torch in.
"""
from __future__ import annotations

from models.measure.fail import fail

ROOT = 0  # broadcast's source rank
PATTERN_PERIOD = 7


def pattern(torch, n_elem: int, rank: int, device):
    """Rank `rank`'s data: element i is (rank + 1) + (i mod 7)."""
    return torch.arange(n_elem, dtype=torch.float32, device=device).remainder_(PATTERN_PERIOD).add_(rank + 1)


def expected(torch, op: str, n_elem: int, world: int, device, rank: int = ROOT):
    """What rank `rank` must hold after the op, from the formula alone. n_elem: the result's elements (for
    reduce_scatter: the input's, of which the rank holds the rank-th of `world` equal slices of the sum)."""
    if op == "allreduce":
        period = torch.arange(n_elem, dtype=torch.float32, device=device).remainder_(PATTERN_PERIOD)
        return period.mul_(world).add_(world * (world + 1) / 2)
    if op == "allgather":
        return torch.cat([pattern(torch, n_elem // world, r, device) for r in range(world)])
    if op == "reduce_scatter":
        share = n_elem // world
        return expected(torch, "allreduce", n_elem, world, device)[rank * share:(rank + 1) * share].clone()
    if op in ("sendrecv", "pipeline_p2p"):
        return pattern(torch, n_elem, (rank - 1) % world, device)
    return pattern(torch, n_elem, ROOT, device)


def check(result, want, op: str, size: int, rank: int) -> None:
    """Fails the cell, naming the size and the first wrong element, unless `result` is `want` exactly."""
    wrong = (result != want).nonzero()
    if wrong.numel():
        i = int(wrong[0, 0])
        fail(f"{op} of {size} bytes returned a wrong value on rank {rank}: element {i} is "
             f"{float(result[i])}, expected {float(want[i])}")
