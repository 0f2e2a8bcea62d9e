"""The keys that make up a cell, as plain tuples: what analysis, the store and the report index records by.

No imports, so the pure analysis code can name the keys without loading the matrix schema (pydantic, the GPU
catalogue, the YAML loader). bench/planning/matrix.py checks at import time that these tuples equal its schema's fields,
so a key added there and not here fails at once (and in tests/test_cell_keys.py).
"""

# The core axes of every cell, in the order tables show them.
AXIS_KEYS = ("gpu", "framework", "mpi", "ib", "gpus")
# The workload settings (bench.planning.matrix.Workload's fields, in declaration order); any may also be an axis.
WORKLOAD_KEYS = ("model", "engine", "data", "data_layout", "loader_workers", "batch_per_gpu", "image_size",
                 "precision", "warmup_steps", "steps", "repeats", "jobs", "channels_last", "threads",
                 "workers_per_node", "max_message_bytes", "loader", "compile", "optimizer_impl", "cuda_graphs",
                 "seq_len", "grad_accum", "activation_checkpointing", "layout", "tp_across_nodes")
CELL_KEYS = AXIS_KEYS + WORKLOAD_KEYS
# The input pipeline's settings: where the images come from and how they are decoded. A real-data cell's synthetic
# twin, and a 1-worker cell that differs only in these, differ in nothing else (bench/analysis/scaling.py, expected.py).
INPUT_KEYS = ("data", "data_layout", "loader_workers", "loader")
# The workload settings' defaults (bench.planning.matrix.Workload's), for labels that name only what differs from them
# (bench/cells/label.py); bench/planning/matrix.py checks at import time that they are equal.
WORKLOAD_DEFAULTS = {
    "model": "resnet50", "engine": "horovod", "data": "synthetic", "data_layout": "jpeg", "loader_workers": 0,
    "batch_per_gpu": 64, "image_size": 224, "precision": "fp32", "warmup_steps": 10, "steps": 50, "repeats": 3,
    "jobs": 1, "channels_last": True, "threads": None, "workers_per_node": None, "max_message_bytes": None,
    "loader": "auto", "compile": "off", "optimizer_impl": "default", "cuda_graphs": False, "seq_len": None,
    "grad_accum": 1, "activation_checkpointing": False, "layout": None, "tp_across_nodes": False,
}
# The flags, which a store row holds as 0/1 (SQLite has no bool): every workload key whose default is a bool, and the
# fabric. The store's frame, the baseline, the selection and the probe's key turn them back into bools.
BOOL_KEYS = frozenset({*(k for k, v in WORKLOAD_DEFAULTS.items() if isinstance(v, bool)), "ib"})
