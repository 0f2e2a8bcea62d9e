"""Channels-last parameters under Horovod's hooks (the GPU layout: models/gpu/plan.py puts parameters channels-last
on a GPU), on CPU: one step of hvd.DistributedOptimizer with models/workloads/resnet50/torch_layout.py's compression.

Each rank feeds its own batch to the same channels-last model, computes its local gradients once without Horovod
(the reference), then through DistributedOptimizer. After synchronize() every gradient must be the mean of the ranks'
local gradients and keep the parameter's layout; after the step the parameters must be equal on every rank and
still channels-last. Writes one JSON line per rank to argv[1].
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import horovod.torch as hvd  # noqa: E402
import torch  # noqa: E402

from models.workloads.resnet50.torch_layout import LayoutPreservingCompression  # noqa: E402

hvd.init()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 3),
                            torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 5))
model = model.to(memory_format=torch.channels_last)
gen = torch.Generator().manual_seed(100 + hvd.rank())
x = torch.randn(4, 3, 8, 8, generator=gen).contiguous(memory_format=torch.channels_last)
y = torch.randint(0, 5, (4,), generator=gen)
loss_fn = torch.nn.CrossEntropyLoss()

loss_fn(model(x), y).backward()
local = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
expected = {n: hvd.allgather(g.contiguous().unsqueeze(0), name=f"ref.{n}").mean(0) for n, g in local.items()}
model.zero_grad(set_to_none=True)

opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5), named_parameters=model.named_parameters(),
                               op=hvd.Average, compression=LayoutPreservingCompression)
loss_fn(model(x), y).backward()
opt.synchronize()
conv_weights = [n for n, p in model.named_parameters() if p.dim() == 4]
result = {
    "rank": hvd.rank(),
    "conv_grads_channels_last": all(
        p.grad.is_contiguous(memory_format=torch.channels_last) and not p.grad.is_contiguous()
        for n, p in model.named_parameters() if n in conv_weights),
    "max_grad_error": max(float((p.grad - expected[n]).abs().max()) for n, p in model.named_parameters()),
    "max_grad_spread": max(float((local[n] - expected[n]).abs().max()) for n in local),  # ranks did differ
}
with opt.skip_synchronize():
    opt.step()
flat = torch.cat([p.detach().contiguous().flatten() for p in model.parameters()])
gathered = hvd.allgather(flat.unsqueeze(0), name="after")
result["params_equal_across_ranks"] = bool(torch.equal(gathered[0], gathered[-1]))
result["conv_params_channels_last"] = all(p.is_contiguous(memory_format=torch.channels_last) and not p.is_contiguous()
                                          for n, p in model.named_parameters() if n in conv_weights)
with open(sys.argv[1], "a", encoding="utf-8") as f:
    f.write(json.dumps(result) + "\n")
hvd.shutdown()
