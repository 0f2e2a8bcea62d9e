"""Report: charts (matplotlib) and rendering (HTML, Markdown) from the store only."""
