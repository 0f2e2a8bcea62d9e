"""What a worker or a node reports about the machine it runs on. Programs bench starts by path: node_probe.py (the
hosts backend's node check), diag_probe.py (`bench diagnose`), mpi_probe.py (`bench doctor`). What the workers
sample beside their windows: envprobe.py (what ran, with cgroup_probe.py and cpufeatures.py), host_load.py (what else
used the node), engine_probe.py (the engine probe's worker side)."""
