"""Layer 2, planning: the matrix schema, cell ids, and which cells can run and why not (no process is started)."""
