"""The GPU pieces of a worker (docs/gpu.md): where it computes and in what precision (plan.py), what nvidia-smi
prints (query.py), what ran on the GPU (facts.py), sampled power (power.py), the CUDA-event cross-check
(cuda_timing.py), and what a GPU worker measures beside the meter, window by window (window.py)."""
