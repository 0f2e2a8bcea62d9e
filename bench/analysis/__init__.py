"""Pure analysis functions: DataFrames in, DataFrames out."""
