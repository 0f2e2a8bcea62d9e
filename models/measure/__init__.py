"""The measuring core every workload shares: its flags and measured-window loop (common.py), the one throughput
definition (meter.py), the per-rank phase clock (phases.py), the record writer (record.py), how a worker refuses
(fail.py), the freed-memory policy (allocator.py) and the test hooks (faults.py, inert unless set)."""
