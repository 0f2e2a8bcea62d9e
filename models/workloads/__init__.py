"""The workloads, one folder each: resnet50/ (ResNet-50 v1.5 per framework), transformer/ (the decoder-only
language model, its engines and shapes), collectives/ (the collective sweep). Each folder's `*_worker.py` is the
program a launcher starts by path. Shared by several: gradients.py (the models' gradient streams), torch_native.py
(DDP's process group), torch_horovod.py (Horovod's ranks for the PyTorch workers)."""
