"""What workloads exist, and their versions. Light on purpose: the control plane reads it without importing torch.

A workload's version is part of every cell id: bump it when a change alters what is measured.
"""

WORKLOADS = {
    # framework: script in this folder, version, what it can do
    "pytorch": {
        "script": "resnet50_pytorch.py",
        "version": "1",
        # What `bench doctor` imports to find the framework, and Horovod's module for it (None: rides on another's).
        "imports": "torch",
        "horovod_module": "horovod.torch",
        "data": ("synthetic", "imagenet"),
        "data_layout": ("jpeg",),
        "engines": ("horovod", "native"),
        "precision": ("fp32", "fp16", "bf16"),
    },
    "tensorflow": {
        "script": "resnet50_tensorflow.py",
        "version": "1",
        "imports": "tensorflow",
        "horovod_module": "horovod.tensorflow",
        "data": ("synthetic", "imagenet"),
        "data_layout": ("jpeg", "tfrecord"),
        "engines": ("horovod",),
        "precision": ("fp32", "fp16", "bf16"),
    },
    "keras": {
        "script": "resnet50_keras.py",
        "version": "1",
        # Keras 2 as tf-keras: Horovod 0.28's Keras optimizer does not average under Keras 3 (docs/mpi-flavours.md).
        "imports": "tf_keras",
        "version_label": "tf-keras ",
        "horovod_module": None,  # horovod.tensorflow.keras, built with TensorFlow's
        "needed_for": "Keras 2 for Horovod's Keras integration",
        "data": ("synthetic", "imagenet"),
        "data_layout": ("jpeg", "tfrecord"),
        "engines": ("horovod",),
        "precision": ("fp32", "fp16", "bf16"),
        "min_warmup_steps": 1,  # Horovod's Keras callback broadcasts the weights after the first batch
    },
}

# Cell kinds beside ResNet-50 training (the cell key `model`): a collective sweep, run by the same engine and launcher
# a training cell of the same settings uses. Not a framework: its cells name the framework whose binding runs it.
# One worker program runs every op (`--op`). `bus_factor` is nccl-tests' bus bandwidth factor (its
# doc/PERFORMANCE.md), busbw = algbw x factor over n ranks: the share of the message each link carries in the ring
# algorithm, so busbw compares with a link's rate whatever n is. The one table of them: the worker and the record's
# validation both read it.
COLLECTIVES = {
    "allreduce": {
        "script": "collectives.py",
        "version": "1",
        "frameworks": ("pytorch",),  # horovod.torch or torch.distributed move the tensors
        "bus_factor": lambda n: 2 * (n - 1) / n,  # reduce-scatter then allgather: 2(n-1)/n of the message per link
        "bus_formula": "2(n-1)/n",
    },
    "allgather": {
        "script": "collectives.py",
        "version": "1",
        "frameworks": ("pytorch",),
        "bus_factor": lambda n: (n - 1) / n,  # each rank receives the n-1 slices it does not hold
        "bus_formula": "(n-1)/n",
    },
    "broadcast": {
        "script": "collectives.py",
        "version": "1",
        "frameworks": ("pytorch",),
        "bus_factor": lambda n: 1.0,  # every link carries the whole message once
        "bus_formula": "1",
    },
}

# ResNet-50's fp32 gradients, 25,557,032 parameters x 4 bytes: what one training step reduces, and the default
# largest message of a collective sweep.
RESNET50_GRADIENT_BYTES = 25_557_032 * 4
