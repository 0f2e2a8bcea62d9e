"""TensorFlow set-up shared by the TensorFlow and Keras workloads. Import this before tensorflow.

Horovod 0.28's Keras integration only averages with Keras 2: under Keras 3 (TF >= 2.16's default) its
DistributedOptimizer + model.fit silently does not average (two ranks meant to end at 5.0 ended at 2.0 and 8.0).
TF_USE_LEGACY_KERAS=1 makes tf.keras the tf-keras package (Keras 2), which it does average with; the averaging tests
prove it for both workloads.
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


def horovod_comm(hvd, tf):
    from models.measure.common import Comm

    zero = tf.constant(0.0)
    return Comm(hvd.rank(), hvd.size(), hvd.local_size(),
                barrier=lambda: hvd.allreduce(zero, name="bench.barrier").numpy(),
                allgather_object=hvd.allgather_object,
                broadcast_object=lambda obj: hvd.broadcast_object(obj, root_rank=0))


def start(args, framework: str):
    """Set-up shared by the TensorFlow and Keras workloads: threads, GPU and precision first (TensorFlow fixes them
    at first use, and Horovod's init uses it), then Horovod, or a single process without it. Refuses the settings
    the `framework` workload's rules (models/registry/rules.py) refuse on this device, with the plan's text.

    Returns (tf, hvd or None, comm, threads, on_gpu, data_format)."""
    import tensorflow as tf

    from models.measure.common import import_horovod, local_rank_and_size_from_env, single_process_comm, threads_for
    from models.measure.fail import fail
    from models.registry.rules import workload_refusal

    local_rank, local_size = local_rank_and_size_from_env()
    threads = threads_for(args, local_size)
    on_gpu = configure(tf, threads, local_rank, args.precision)
    hvd = import_horovod("horovod.tensorflow")
    if hvd is not None:
        hvd.init()
        comm = horovod_comm(hvd, tf)
    else:
        comm = single_process_comm()
    if refusal := workload_refusal(framework, vars(args), "gpu" if on_gpu else "cpu"):
        fail(refusal)
    data_format = "channels_last" if args.channels_last else "channels_first"
    return tf, hvd, comm, threads, on_gpu, data_format
