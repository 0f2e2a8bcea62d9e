"""Averaging check for the Keras workload's mechanism (hvd.keras.DistributedOptimizer + model.fit).

Under Keras 3 (TF 2.21's default, 3.15) this very check ends at -1 and -2 instead of -1.5: Horovod's Keras optimizer
silently does not average there. Writes `rank weight controller` to argv[1]. With argv[2] == "fp16", the optimizer is
wrapped the way the workload wraps it for fp16 (a LossScaleOptimizer around Horovod's) under mixed_float16.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import models.workloads.resnet50.tf_env  # noqa: E402,F401  (must precede tensorflow)

# isort: split

import horovod.tensorflow.keras as hvd  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

hvd.init()
fp16 = sys.argv[2:] == ["fp16"]
if fp16:
    tf.keras.mixed_precision.set_global_policy("mixed_float16")
model = tf.keras.Sequential([tf.keras.Input(shape=(1,)),
                             tf.keras.layers.Dense(1, use_bias=False, kernel_initializer="zeros")])
opt = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(learning_rate=1.0))
if fp16:  # a modest initial scale: the default 2**15 overflows fp16 on this gradient and skips the one step
    opt = tf.keras.mixed_precision.LossScaleOptimizer(opt, initial_scale=2.0 ** 7)
model.compile(optimizer=opt, loss=lambda y_true, y_pred: tf.reduce_mean(tf.cast(y_pred, tf.float32)))
# d loss / d w = x = rank + 1
x = np.full((1, 1), float(hvd.rank() + 1), dtype="float32")
model.fit(x, np.zeros((1, 1), dtype="float32"), batch_size=1, epochs=1, verbose=0,
          callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
weight = float(model.layers[-1].kernel.numpy()[0, 0])
with open(sys.argv[1], "a", encoding="utf-8") as f:
    import horovod.tensorflow as hvd_tf

    f.write(f"{hvd.rank()} {weight!r} {'mpi' if hvd_tf.mpi_enabled() else 'gloo'}\n")
hvd.shutdown()
