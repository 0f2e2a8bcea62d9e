"""TensorFlow set-up shared by the TensorFlow and Keras workloads. Import this before tensorflow.

Horovod 0.28's Keras integration only averages with Keras 2: under Keras 3 (TF >= 2.16's default) its
DistributedOptimizer + model.fit silently does not average (FACTS.md). TF_USE_LEGACY_KERAS=1 makes tf.keras the
tf-keras package (Keras 2), which it does average with; the averaging tests prove it for both workloads.
"""
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # keep worker logs readable


def configure(tf, threads: int, local_rank: int, precision: str):
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(max(1, min(2, threads)))
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        tf.config.set_visible_devices(gpus[local_rank % len(gpus)], "GPU")
        tf.config.experimental.set_memory_growth(gpus[local_rank % len(gpus)], True)
    policy = {"fp32": "float32", "fp16": "mixed_float16", "bf16": "mixed_bfloat16"}[precision]
    tf.keras.mixed_precision.set_global_policy(policy)
    return bool(gpus)
