"""Writes tests/data/cell_ids_golden.json: cells and the ids the id code of the day gives them.

The committed JSON was made by running this at commit d9cf06a (main before id scheme 1 was written down, when the
id hashed every key present):

    git worktree add /tmp/old d9cf06a && cd /tmp/old && PYTHONPATH=$PWD python3 <this file> > cell_ids_golden.json

Never regenerate it with newer code: the point of the file is that today's code must still give these ids.
"""
from __future__ import annotations

import json
import sys

from bench.cell import cell_id
from bench.matrix import load_matrix_text

# Matrices that between them set every key of 2025's cells away from its default at least once, across every
# framework (each has its own workload version in the id).
MATRICES = [
    "name: defaults\naxes: {gpu: [cpu], gpus: [2]}\n",
    "name: ci-cpu\n"
    "workload: {batch_per_gpu: 8, image_size: 32, warmup_steps: 1, steps: 4, repeats: 3, jobs: 3, threads: 1,"
    " channels_last: false}\n"
    "axes: {gpu: [cpu], framework: [pytorch], mpi: [gloo], ib: [false], gpus: [1, 2]}\n",
    "name: spread\n"
    "axes: {gpu: [V100, H100], framework: [pytorch, tensorflow, keras], mpi: [openmpi, intelmpi, mpich],"
    " ib: [true], gpus: [8, 16]}\n"
    "exclude: [{gpu: H100, mpi: mpich}]\n",
    "name: knobs\n"
    "workload: {engine: native, data: imagenet, data_layout: tfrecord, loader_workers: 4, batch_per_gpu: 128,"
    " image_size: 160, precision: bf16, warmup_steps: 0, steps: 100, repeats: 5, jobs: 2, channels_last: false,"
    " threads: 8}\n"
    "axes: {gpu: [A100], precision: [fp16, bf16], threads: [null, 4]}\n",
]


def main() -> None:
    out = []
    for text in MATRICES:
        cells = load_matrix_text(text).cells()
        out.append({"matrix": text, "cells": [{"cell": c, "cell_id": cell_id(c)} for c in cells]})
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
