"""Pure analysis functions: DataFrames and numbers in, DataFrames and numbers out; no files read, nothing printed.

Input the analysis cannot use (a selector naming no cell, a fabric a SKU lacks) raises AnalysisError, a ValueError
with one line of text; the CLI turns it into that line on stderr and exit 2, as it does for its own BenchInputError.
"""


class AnalysisError(ValueError):
    """Input the analysis cannot use, said in one line."""
