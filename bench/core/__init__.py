"""Layer 0, foundation: what every layer uses and nothing of bench's own is under — the one error type, secret
redaction, YAML with line numbers, and the source revision a run ran."""
