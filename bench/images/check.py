"""The proof that a built cpu image works: inside it, as the unprivileged `bench` user, `bench doctor` and then a
2-worker PyTorch cell under the image's own MPI flavour through `python -m bench run` (the local backend), its store
written to a host folder mounted at /work, and read back here: the records and the transport verdict."""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from bench.images.engines import Engine
from bench.images.recipes import Variant

IMAGE_USER = "10001:10001"  # `bench`, made by docker/Dockerfile.j2's apt layer
IN_IMAGE = "/work"  # where a host folder (matrix in, store out) is mounted in the container
CELL_TIMEOUT_S = 900
# A small cell (about a minute on two busy cores): ResNet-50 on 32 px images, the workload the suite's cells use.
MATRIX = """name: image-{variant}
workload: {{batch_per_gpu: 4, image_size: 32, warmup_steps: 1, steps: 3, repeats: 2, threads: 1,
           channels_last: false}}
axes: {{gpu: [cpu], framework: [pytorch], mpi: [{mpi}], gpus: [2]}}
"""


@dataclass
class CellCheck:
    image: str
    doctor_rc: int
    run_rc: int
    rows: list[dict]  # the store's records rows
    tail: str  # the end of the container's output (for a failure's message)

    @property
    def ok(self) -> bool:
        return self.doctor_rc == 0 and self.run_rc == 0 and len(self.rows) > 0 and all(
            r["status"] == "ok" for r in self.rows)

    def line(self) -> str:
        if not self.rows:
            return (f"{self.image}: no records (doctor exit {self.doctor_rc}, run exit {self.run_rc}): "
                    f"{self.tail[-300:]}")
        rates = ", ".join(f"{r['samples_per_sec']:.1f}" for r in self.rows if r["samples_per_sec"])
        first = self.rows[0]
        return (f"{self.image}: {first['mpi']} {first['world_size']} workers, {len(self.rows)} records "
                f"({', '.join(r['status'] for r in self.rows)}), img/s {rates}, transport "
                f"{first['effective_transport']}; doctor exit {self.doctor_rc}")


def hand_to_image_user(*paths: Path) -> None:
    """The image's user writes the store into the mounted folder: give it the folder (and what was put in it)."""
    uid, gid = (int(x) for x in IMAGE_USER.split(":"))
    for path in paths:
        os.chown(path, uid, gid)


def user_container_argv(engine: Engine, image: str, folder: Path, command: list[str], *options: str) -> list[str]:
    """`<engine> run --rm` of `command` in `image` as its unprivileged user, `folder` mounted at /work (one place for
    how bench runs its images: this check and `bench ab`'s image sides)."""
    return engine.command("run", "--rm", "--user", IMAGE_USER, "--shm-size", "1g", "-v", f"{folder}:{IN_IMAGE}",
                          *options, image, *command)


def run_cell(engine: Engine, v: Variant, image: str, work: Path, mpi: str | None = None) -> CellCheck:
    """doctor, then the cell, in one container; `work` (created here, given to the image's user) keeps the store."""
    mpi = mpi or v.mpi
    work.mkdir(parents=True, exist_ok=True)
    (work / "m.yaml").write_text(MATRIX.format(variant=v.id, mpi=mpi))
    hand_to_image_user(work, work / "m.yaml")
    script = (f"cd {IN_IMAGE} && python -m bench doctor > doctor.txt 2>&1; echo \"doctor=$?\"; "
              f"python -m bench run m.yaml --store {IN_IMAGE}/image-check.db; echo \"run=$?\"")
    argv = user_container_argv(engine, image, work, ["bash", "-c", script])
    done = subprocess.run(argv, capture_output=True, text=True, timeout=CELL_TIMEOUT_S, check=False)
    out = done.stdout + done.stderr
    codes = dict(line.split("=", 1) for line in done.stdout.splitlines() if line.startswith(("doctor=", "run=")))
    return CellCheck(image, int(codes.get("doctor", -1)), int(codes.get("run", -1)), read_rows(work), out)


def read_rows(work: Path) -> list[dict]:
    from bench.store import Store

    db = work / "image-check.db"
    if not db.exists():
        return []
    with Store(db, read_only=True) as store:
        return sorted(store.records(), key=lambda r: r["repeat"])

