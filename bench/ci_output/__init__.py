"""Machine-readable results for CI systems: JSON (versioned schemas under docs/ci/), JUnit XML, and GitHub
Actions' step summary and annotations. Writers only: the verdicts come from bench/analysis/."""
