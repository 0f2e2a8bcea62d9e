"""The PyTorch worker's own model and optimizer (models/workloads/resnet50/pytorch_worker.py build_model) under Horovod
with the GPU's channels-last parameters, on CPU: after one step every parameter, its gradient and its momentum buffer
must share strides. CUDA's fused SGD kernel refuses a step otherwise (check_fast_path_restrictions, seen on an H200 when
a zero-grad step had made NCHW momentum buffers before the layout switch); the CPU kernel does not check, so this does.
Writes one JSON line per rank to argv[1].
"""
import json
import os
import sys
from types import SimpleNamespace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import horovod.torch as hvd  # noqa: E402
import torch  # noqa: E402

from models.workloads.resnet50.pytorch_worker import Worker, build_model  # noqa: E402
from models.workloads.torch_horovod import horovod_comm  # noqa: E402

hvd.init()
torch.set_num_threads(1)
worker = Worker(horovod_comm(hvd, torch), hvd, None, None, hvd.local_rank(), torch.device("cpu"),
                torch.channels_last, torch.channels_last, None, None)
model, optimizer = build_model(SimpleNamespace(num_classes=10, batch_size=2), torch, worker)
gen = torch.Generator().manual_seed(hvd.rank())
x = torch.randn(2, 3, 32, 32, generator=gen).contiguous(memory_format=torch.channels_last)
y = torch.randint(0, 10, (2,), generator=gen)
optimizer.zero_grad()
torch.nn.functional.cross_entropy(model(x), y).backward()
optimizer.step()
params = list(model.named_parameters())
mismatched = [n for n, p in params
              if not p.stride() == p.grad.stride() == optimizer.state[p]["momentum_buffer"].stride()]
result = {"rank": hvd.rank(), "params": len(params), "mismatched": mismatched[:5], "n_mismatched": len(mismatched),
          "conv_channels_last": all(p.is_contiguous(memory_format=torch.channels_last) and not p.is_contiguous()
                                    for _, p in params if p.dim() == 4 and p.shape[-1] > 1)}
with open(sys.argv[1], "a", encoding="utf-8") as f:
    f.write(json.dumps(result) + "\n")
hvd.shutdown()
