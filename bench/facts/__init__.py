"""Layer 0, foundation: published and counted facts — the GPU catalogue with its dense peaks, model FLOPs per
image, and the 2018 study's published results."""
