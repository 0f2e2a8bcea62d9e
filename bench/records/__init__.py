"""Layer 0, foundation: what a record is — the versioned schema every worker record passes, the transport
vocabulary read out of a job's log, and when a cell's records make it complete."""
