"""What workloads exist, and their versions. Light on purpose: the control plane reads it without importing torch.

A workload's version is part of every cell id: bump it when a change alters what is measured.
"""

WORKLOADS = {
    # framework: script in this folder, version, what it can do
    "pytorch": {
        "script": "resnet50_pytorch.py",
        "version": "1",
        "data": ("synthetic", "imagenet"),
        "data_layout": ("jpeg",),
        "engines": ("horovod", "native"),
        "precision": ("fp32", "fp16", "bf16"),
    },
    "tensorflow": {
        "script": "resnet50_tensorflow.py",
        "version": "1",
        "data": ("synthetic", "imagenet"),
        "data_layout": ("jpeg", "tfrecord"),
        "engines": ("horovod",),
        "precision": ("fp32", "fp16", "bf16"),
    },
    "keras": {
        "script": "resnet50_keras.py",
        "version": "1",
        "data": ("synthetic", "imagenet"),
        "data_layout": ("jpeg", "tfrecord"),
        "engines": ("horovod",),
        "precision": ("fp32", "fp16", "bf16"),
        "min_warmup_steps": 1,  # Horovod's Keras callback broadcasts the weights after the first batch
    },
}
