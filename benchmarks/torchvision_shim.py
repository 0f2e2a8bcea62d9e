"""Runs a script that imports torchvision, on a CPU-only torch.

The registry's torchvision builds are CUDA builds; with CPU torch its import fails on `torchvision::nms`. Defining
the two operator schemas first makes its pure-Python parts (models) importable; its decoding and C++ ops stay
unavailable on CPU.
Usage: python torchvision_shim.py SCRIPT [ARGS...]
"""
import runpy
import sys

import torch

_lib = torch.library.Library("torchvision", "DEF")  # kept alive for the whole run
_lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
_lib.define("qnms(Tensor qdets, Tensor scores, float iou_threshold) -> Tensor")

script, *rest = sys.argv[1:]
sys.argv = [script, *rest]
runpy.run_path(script, run_name="__main__")
