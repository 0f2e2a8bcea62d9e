"""The decoder-only transformer language model (docs/transformer.md): its shapes and counts (shapes.py, no torch),
the module (model.py), the engines that train it data-parallel (engines.py) and the worker (pytorch_worker.py)."""
