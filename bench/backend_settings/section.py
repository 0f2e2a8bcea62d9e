"""The matrix's `backend` section: the settings every backend shares, plus one section per backend that has a
config schema of its own (`backend.slurm`, `backend.azureml`, ...), all derived from the registry."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from bench.backend_settings.registry import BACKENDS, load


class SampleSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    classes: int = Field(gt=0, le=1000)
    per_class: int = Field(gt=0, le=10_000)


BackendName = Literal[tuple(BACKENDS)]  # type: ignore[valid-type]


class _Common(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    name: BackendName = "local"
    # Per-cell wall-clock limit; the whole process group is killed past it.
    timeout_s: int = Field(1800, gt=0)
    # Where data=imagenet cells read from (train/<wnid>/*.JPEG and/or tfrecord/train-*); a relative path is taken
    # from the directory bench runs in. Where the data set lives belongs to the machine, not to the cell.
    imagenet_dir: str | None = None
    # If set and imagenet_dir does not exist, `run` makes a generated sample there first (both layouts).
    imagenet_sample: SampleSpec | None = None

    @model_validator(mode="before")
    @classmethod
    def _bare_name(cls, value: Any) -> Any:
        # `backend: local` is shorthand for `backend: {name: local}`.
        return {"name": value} if isinstance(value, str) else value


def _sections() -> dict[str, Any]:
    fields = {}
    for name, entry in BACKENDS.items():
        if entry.config:
            schema = load(entry.config)
            fields[name] = (schema, schema())
    return fields


BackendSettings = create_model("Backend", __base__=_Common, **_sections())
