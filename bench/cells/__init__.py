"""Layer 0, foundation: a cell's keys and their defaults, its one label, and the one syntax that selects cells."""
