"""The `hosts` backend: machines reached over ssh, no scheduler (backend.py); the nodes a cell spans (nodes.py),
the leash that ends a job's remote processes (leash.py) and `bench diagnose`'s probes over ssh (probes.py)."""
