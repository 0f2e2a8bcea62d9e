"""Layer 5, results: `bench import`, results nobody here measured, loaded into the store beside the measured ones."""
