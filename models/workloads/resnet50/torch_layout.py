"""Channels-last training under Horovod.

Horovod 0.28's allreduce only accepts tensors that are contiguous in the default (NCHW) order, while a
channels-last model produces channels-last gradients ("Tensor is required to be contiguous"). Its Compression hook
is the documented place to transform a gradient before and after the allreduce: reduce a contiguous copy, then hand
the result back in the layout the parameter uses.
"""
from __future__ import annotations

import torch
from horovod.torch.compression import Compressor


class LayoutPreservingCompression(Compressor):
    @staticmethod
    def compress(tensor: torch.Tensor):
        if tensor.is_contiguous():
            return tensor, None
        layout = torch.channels_last if tensor.dim() == 4 and tensor.is_contiguous(
            memory_format=torch.channels_last) else None
        return tensor.contiguous(), layout

    @staticmethod
    def decompress(tensor: torch.Tensor, layout):
        return tensor if layout is None else tensor.contiguous(memory_format=layout)
