"""Averaging check for the TensorFlow workload's mechanism (GradientTape + grouped_allreduce(op=Average)).

Rank r's gradient for a scalar weight starting at 0 is (r + 1); one SGD step with lr = 1 must leave -mean(r + 1)
on every rank. Writes `rank weight controller` to argv[1].
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import models.workloads.resnet50.tf_env  # noqa: E402,F401  (must precede tensorflow)

# isort: split

import horovod.tensorflow as hvd  # noqa: E402
import tensorflow as tf  # noqa: E402

hvd.init()
w = tf.Variable([0.0])
opt = tf.keras.optimizers.SGD(learning_rate=1.0)
with tf.GradientTape() as tape:
    loss = tf.reduce_sum(w * float(hvd.rank() + 1))
grads = hvd.grouped_allreduce(tape.gradient(loss, [w]), op=hvd.Average)
opt.apply_gradients(zip(grads, [w]))
with open(sys.argv[1], "a", encoding="utf-8") as f:
    f.write(f"{hvd.rank()} {float(w.numpy()[0])!r} {'mpi' if hvd.mpi_enabled() else 'gloo'}\n")
hvd.shutdown()
