"""The `local` backend: cells on this machine (backend.py) and the co-located compute probe it runs
(compute_probe.py)."""
