"""Layer 4, execution: one run (cells in order, records into the store), the doctor's probes and the ImageNet
sample. The backends (bench/backends/) and container images (bench/images/) are this layer too."""
