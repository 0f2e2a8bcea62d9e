"""Layer 5, results: baseline files and the two sides a `bench check` compares (verdicts: bench/analysis/)."""
