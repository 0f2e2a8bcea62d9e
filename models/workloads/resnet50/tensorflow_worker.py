"""Horovod data-parallel ResNet-50 v1.5 training throughput, TensorFlow custom training step, synthetic or
ImageNet data (JPEG tree or TFRecord shards, via tf.data).

tf.GradientTape computes the gradients; Horovod averages them (grouped allreduce, op=Average) before the optimizer
applies them. Same flags, meter and record shape as the other workloads.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..")))  # run from anywhere

import models.workloads.resnet50.tf_env  # noqa: E402,F401  (must precede tensorflow)
from models.measure.common import measure_windows, parse_args, record_base, report_dropped  # noqa: E402
from models.measure.fail import fail  # noqa: E402
from models.probes import engine_probe  # noqa: E402
from models.registry.workloads import WORKLOADS  # noqa: E402

VERSION = WORKLOADS["tensorflow"]["version"]


def optimizer_variables(opt) -> list:
    variables = opt.variables
    return list(variables() if callable(variables) else variables)


# --- set-up ---------------------------------------------------------------------------------------------------------
def build_model(args, tf, hvd, comm, data_format):
    """ResNet-50, its optimizer (loss-scaled for fp16) and loss, with rank 0's state broadcast to every rank."""
    from models.workloads.resnet50.model_tf import resnet50

    tf.random.set_seed(1234)
    model = resnet50(tf.keras, args.image_size, args.num_classes, data_format)
    lr = 0.1 * args.batch_size * comm.size / 256
    opt = tf.keras.optimizers.SGD(learning_rate=lr, momentum=0.9)
    if args.precision == "fp16":  # fp16 needs loss scaling; bf16 has fp32's range and does not
        opt = tf.keras.mixed_precision.LossScaleOptimizer(opt)
    opt.build(model.trainable_variables)
    if hvd is not None:
        hvd.broadcast_variables(model.variables, root_rank=0)
        hvd.broadcast_variables(optimizer_variables(opt), root_rank=0)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    return model, opt, loss_fn


# --- data -----------------------------------------------------------------------------------------------------------
def synthetic_batch(args, tf, comm, data_format):
    """Random (not zero) images and labels, different per rank."""
    shape = (args.batch_size, args.image_size, args.image_size, 3) if data_format == "channels_last" \
        else (args.batch_size, 3, args.image_size, args.image_size)
    gen = tf.random.Generator.from_seed(comm.rank)
    images = gen.normal(shape)
    labels = gen.uniform((args.batch_size,), 0, args.num_classes, dtype=tf.int64)
    return images, labels


def imagenet_fetcher(args, tf, comm):
    """(next_batch, counter): this rank's ImageNet batches from tf.data, with undecodable images counted."""
    from models.data.imagenet_tf import Counter, dataset
    from models.data.layout import DataError

    try:
        it = iter(dataset(tf, args.data_dir, args.data_layout, args.image_size, args.batch_size, comm.rank,
                          comm.size, args.channels_last, numbered=True))
    except DataError as e:
        fail(str(e))
    counter = Counter()

    def next_batch():
        try:
            x, y, numbers = next(it)
            counter.update(numbers.numpy())
        except StopIteration:
            fail("the input pipeline ran dry (every image undecodable?)")
        except DataError as e:
            fail(str(e))
        return x, y

    return next_batch, counter


# --- step -----------------------------------------------------------------------------------------------------------
def probe_pings(tf, hvd, grads):
    """The engine probe's traffic in a step: a 1-element ping per gradient, grouped as the cell's gradients are. Each
    ping is made from its gradient (0 × its first element, 0 even where that is inf or NaN, as fp16's scaled
    gradients can be), so the group waits for the backward pass as the cell's allreduce does. Constant pings could
    run anywhere in the step's graph: with them the cell read 0.88-0.96 of its expected value in ten runs and
    0.91-0.92 in three side by side; with pings from the gradients 0.93-0.97 in those three, and with the update
    waiting for them too 0.95-1.09 in seven runs of a series (docs/diagnose.md)."""
    return hvd.grouped_allreduce([tf.math.multiply_no_nan(tf.reshape(g, [-1])[:1], tf.zeros([1], g.dtype))
                                  for g in grads], name="bench_engine_probe")


def make_train_step(args, tf, hvd, model, opt, loss_fn, default_batch):
    """One compiled step: gradients on the tape, averaged by Horovod, applied; returns the loss as a float."""
    fp16 = args.precision == "fp16"
    probe = engine_probe.active()

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
            scaled = opt.get_scaled_loss(loss) if fp16 else loss
        grads = tape.gradient(scaled, model.trainable_variables)
        if hvd is not None and probe:
            pings = probe_pings(tf, hvd, grads)
            with tf.control_dependencies(pings):  # the update after the pings, as the cell's after its allreduce
                grads = [tf.identity(g) for g in grads]
            loss = loss + 0.0 * tf.add_n([p[0] for p in pings])
        elif hvd is not None:
            grads = hvd.grouped_allreduce(grads, op=hvd.Average)
        if fp16:
            grads = opt.get_unscaled_gradients(grads)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    def train_step(batch=None) -> float:
        x, y = batch if batch is not None else default_batch
        return float(step(x, y))  # reading the loss waits for the step: the device is in sync

    return train_step


def time_engine_probe(args, tf, hvd, comm, model) -> None:
    """The engine probe's timing (models/probes/engine_probe.py): one step's gradients as the step sends them, one
    grouped allreduce of a tensor per variable."""
    bufs = [tf.ones_like(v) for v in model.trainable_variables]

    @tf.function
    def grouped(*tensors):  # arguments, not captured constants: Horovod names the group after its graph tensors
        return hvd.grouped_allreduce(list(tensors), op=hvd.Average)[0]

    engine_probe.report_timings(comm, args.out, 4 * sum(int(tf.size(b)) for b in bufs),
                                lambda: float(tf.reduce_sum(grouped(*bufs))))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(__doc__, argv)
    from models.probes.envprobe import probe_tensorflow
    from models.workloads.resnet50.tf_env import start

    tf, hvd, comm, threads, on_gpu, data_format = start(args, "tensorflow")
    next_batch, counter = imagenet_fetcher(args, tf, comm) if args.data == "imagenet" else (None, None)

    def measure(args) -> int:
        """The model, its step and its windows (the cell's, or the engine probe's: engine_probe.active())."""
        model, opt, loss_fn = build_model(args, tf, hvd, comm, data_format)
        synthetic = synthetic_batch(args, tf, comm, data_format)
        train_step = make_train_step(args, tf, hvd, model, opt, loss_fn, synthetic)
        base = record_base(args, "tensorflow", VERSION, data_format=data_format, threads_per_worker=threads,
                           device="gpu" if on_gpu else "cpu", engine="horovod" if hvd else "none",
                           env_probe=probe_tensorflow(hvd), data=args.data)
        if args.data == "imagenet":
            base["data_layout"] = args.data_layout
        code = measure_windows(args, comm, train_step, float, lambda: None, base, next_batch,
                               batch_samples=lambda batch: int(batch[1].shape[0]))
        if code == 0 and hvd is not None and engine_probe.active():
            time_engine_probe(args, tf, hvd, comm, model)
        return code

    # the engine probe first where the control plane asks for it (models/probes/engine_probe.py), then the cell
    code = engine_probe.first_then(args, comm.rank, measure)
    if counter is not None:
        report_dropped(comm.rank, counter.bad, counter.consumed)
    if hvd is not None:
        hvd.shutdown()
    return code


if __name__ == "__main__":
    sys.exit(main())
