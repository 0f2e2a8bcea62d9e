"""The collective sweep (docs/collectives.md): the worker (sweep_worker.py), what each rank sends and must hold
afterwards (payload.py), and compute beside an allreduce on the same cores (contention.py)."""
