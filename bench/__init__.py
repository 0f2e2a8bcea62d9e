"""bench: distributed data-parallel training throughput benchmarks (Horovod ResNet-50)."""
__version__ = "0.1.0"
