"""A parallel layout: torchtitan's degrees (dp_replicate × dp_shard × tp × pp × cp × ep = world size), the pipeline
schedule and its micro-batches. The data-parallel engines are the layouts with only a DP degree: DDP is
dp_replicate = N, FSDP2 dp_shard = N, HSDP both.

Text form (the planner's `--layout`, the emitted matrix): `dp_shard=8,tp=8,pp=4,schedule=interleaved,v=2,m=16`;
degrees left out are 1, the schedule defaults to 1f1b when pp > 1, `m` (micro-batches) to the planner's choice."""
from __future__ import annotations

from dataclasses import dataclass, replace

DEGREES = ("dp_replicate", "dp_shard", "tp", "pp", "cp", "ep")
SCHEDULES = ("none", "gpipe", "1f1b", "interleaved")
_KEYS = DEGREES + ("schedule", "v", "m")


class LayoutError(ValueError):
    """A layout that cannot be read or cannot be a layout at all (the message is one line for the user)."""


@dataclass(frozen=True)
class Layout:
    dp_replicate: int = 1
    dp_shard: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1  # reserved: mixture-of-experts shapes only; the planner keeps it 1
    schedule: str = "none"  # none when pp == 1
    virtual_stages: int = 1  # model chunks per pipeline rank (interleaved 1F1B only)
    microbatches: int = 1  # per step, per data-parallel replica

    def __post_init__(self):
        for name in DEGREES:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise LayoutError(f"layout: {name} must be a positive whole number, got {value!r}")
        if self.schedule not in SCHEDULES:
            raise LayoutError(f"layout: schedule {self.schedule!r} is not one of {', '.join(SCHEDULES)}")
        if self.pp == 1 and self.schedule != "none":
            raise LayoutError(f"layout: schedule {self.schedule} needs pp > 1")
        if self.pp > 1 and self.schedule == "none":
            raise LayoutError("layout: pp > 1 needs a schedule (gpipe, 1f1b or interleaved)")
        for name in ("virtual_stages", "microbatches"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise LayoutError(f"layout: {name} must be a positive whole number, got {value!r}")
        if self.virtual_stages > 1 and self.schedule != "interleaved":
            raise LayoutError("layout: virtual stages (v) need schedule=interleaved")

    @property
    def world(self) -> int:
        return self.dp_replicate * self.dp_shard * self.tp * self.pp * self.cp * self.ep

    @property
    def dp(self) -> int:
        """Data-parallel replicas of the batch: each takes its own sequences."""
        return self.dp_replicate * self.dp_shard

    @property
    def shard_group(self) -> int:
        """Ranks the parameters and optimizer state are sharded over (torchtitan shards over dp_shard × cp)."""
        return self.dp_shard * self.cp

    @property
    def bubble(self) -> float:
        """The pipeline bubble over the ideal compute time: (p − 1)/m, interleaved (1/v)(p − 1)/m (Narayanan et al.,
        2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM", sections 2.2.1-2)."""
        if self.pp == 1:
            return 0.0
        return (self.pp - 1) / (self.virtual_stages * self.microbatches)

    def label(self) -> str:
        """The text form with every degree above 1 (and the schedule's settings), e.g. `dp_shard=8,tp=8`."""
        parts = [f"{name}={getattr(self, name)}" for name in DEGREES if getattr(self, name) > 1]
        if self.pp > 1:
            parts.append(f"schedule={self.schedule}")
            if self.virtual_stages > 1:
                parts.append(f"v={self.virtual_stages}")
            parts.append(f"m={self.microbatches}")
        return ",".join(parts) or "dp_replicate=1"

    def as_dict(self) -> dict:
        return {**{name: getattr(self, name) for name in DEGREES}, "schedule": self.schedule,
                "virtual_stages": self.virtual_stages, "microbatches": self.microbatches}

    def with_microbatches(self, microbatches: int) -> "Layout":
        return replace(self, microbatches=microbatches)


def parse_layout(text: str, *, world: int | None = None) -> tuple[Layout, bool]:
    """A layout from its text form, and whether it named its micro-batches (`m=`). With `world`, a product of the
    degrees that is not the world size is refused. LayoutError names what is wrong."""
    values: dict[str, int | str] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        key, sep, raw = part.partition("=")
        key, raw = key.strip(), raw.strip()
        if not sep or not raw:
            raise LayoutError(f"layout {text!r}: {part!r} is not key=value")
        if key not in _KEYS:
            raise LayoutError(f"layout {text!r}: unknown key {key!r} (known: {', '.join(_KEYS)})")
        if key == "schedule":
            values[key] = raw.lower()
            continue
        try:
            values[key] = int(raw)
        except ValueError:
            raise LayoutError(f"layout {text!r}: {key} takes a whole number, got {raw!r}") from None
    named_m = "m" in values
    v, m = values.pop("v", 1), values.pop("m", 1)
    pp = values.get("pp", 1)
    schedule = values.pop("schedule", "interleaved" if isinstance(v, int) and v > 1 else
                          ("1f1b" if isinstance(pp, int) and pp > 1 else "none"))
    layout = Layout(**values, schedule=schedule, virtual_stages=v, microbatches=m)
    if world is not None and layout.world != world:
        raise LayoutError(f"layout {text!r}: the degrees' product is {layout.world}, not the world size {world}")
    return layout, named_m


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def every_layout(world: int, *, virtual_stages: tuple[int, ...] = (2, 4)) -> list[Layout]:
    """Every split of `world` into dp_replicate × dp_shard × tp × pp × cp (ep = 1), each pipelined one once per
    schedule (1F1B, and interleaved at each of `virtual_stages`; GPipe is 1F1B's time with more memory, so it is
    left to `--layout`). Micro-batches are left at 1: the planner sets them from the batch."""
    out = []
    for tp in _divisors(world):
        for pp in _divisors(world // tp):
            for cp in _divisors(world // (tp * pp)):
                rest = world // (tp * pp * cp)
                for dp_shard in _divisors(rest):
                    base = dict(dp_replicate=rest // dp_shard, dp_shard=dp_shard, tp=tp, pp=pp, cp=cp)
                    if pp == 1:
                        out.append(Layout(**base))
                        continue
                    out.append(Layout(**base, schedule="1f1b"))
                    out.extend(Layout(**base, schedule="interleaved", virtual_stages=v) for v in virtual_stages)
    return out
