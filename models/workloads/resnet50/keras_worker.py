"""Horovod data-parallel ResNet-50 v1.5 training throughput, Keras model.fit, synthetic or ImageNet data.

Horovod's Keras DistributedOptimizer averages the gradients and its BroadcastGlobalVariablesCallback starts every
rank from rank 0's weights (after the first batch, so at least one warm-up step is needed). The measured windows
are opened and closed by a callback around model.fit's batches, with the same meter as the other workloads.
model.fit's train function is replaced by one that fetches each batch in Python and then runs the compiled step,
so the time spent waiting for input is measured the same way as in the other workloads.
"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..")))  # run from anywhere

import models.workloads.resnet50.tf_env  # noqa: E402,F401  (must precede tensorflow)
from models.measure.common import WindowLoop, parse_args, record_base, report_dropped  # noqa: E402
from models.measure.fail import fail  # noqa: E402
from models.probes import engine_probe  # noqa: E402
from models.registry.workloads import WORKLOADS  # noqa: E402

VERSION = WORKLOADS["keras"]["version"]


def timed_input(tf, model, unpack=lambda batch: batch):
    """`model` whose model.fit fetches each batch outside the compiled step and adds the wait to .input_wait_s.

    tf.keras' own train function calls next(iterator) inside its tf.function, where no clock can see it; this one
    does the same two things (fetch, then the model's train_step, compiled) with the fetch timed. `unpack` sees
    each fetched batch first and returns what the step trains on (the real-data path counts dropped images)."""

    class TimedInputModel(tf.keras.Model):
        input_wait_s = 0.0

        def make_train_function(self, force=False):
            if self.train_function is not None and not force:
                return self.train_function
            step = tf.function(self.train_step, reduce_retracing=True)

            def train_function(iterator):
                t = time.perf_counter()
                data = next(iterator)
                self.input_wait_s += time.perf_counter() - t
                return step(unpack(data))

            self.train_function = train_function
            return train_function

    return TimedInputModel(model.inputs, model.outputs, name=model.name)


# --- data -----------------------------------------------------------------------------------------------------------
def synthetic_dataset(args, tf, comm, data_format):
    """One random (not zero) batch, different per rank, repeated for ever."""
    shape = (args.image_size, args.image_size, 3) if data_format == "channels_last" \
        else (3, args.image_size, args.image_size)
    gen = tf.random.Generator.from_seed(comm.rank)
    images = gen.normal((args.batch_size, *shape))
    labels = gen.uniform((args.batch_size,), 0, args.num_classes, dtype=tf.int64)
    # Nothing in this pipeline to tune; with tf.data's autotuner on, deleting an iterator that was read eagerly
    # waited ~0.7 s for every step run (measured: 33 s after a 43-step cell), outside the windows but in wall time.
    no_autotune = tf.data.Options()
    no_autotune.autotune.enabled = False
    return tf.data.Dataset.from_tensors((images, labels)).repeat().with_options(no_autotune)


def imagenet_dataset(args, tf, comm):
    """(dataset, unpack, counter): this rank's ImageNet batches; `unpack` counts undecodable images per batch."""
    from models.data.imagenet_tf import Counter
    from models.data.imagenet_tf import dataset as imagenet
    from models.data.layout import DataError

    try:
        dataset = imagenet(tf, args.data_dir, args.data_layout, args.image_size, args.batch_size, comm.rank,
                           comm.size, args.channels_last, numbered=True)
    except DataError as e:
        fail(str(e))
    counter = Counter()

    def unpack(batch):
        x, y, numbers = batch
        counter.update(numbers.numpy())  # raises DataError past 1% undecodable
        return x, y

    return dataset, unpack, counter


# --- set-up ---------------------------------------------------------------------------------------------------------
def compiled_model(args, tf, hvd, comm, data_format, unpack):
    """ResNet-50 with timed input, compiled with Horovod's averaging optimizer (loss-scaled outermost for fp16)."""
    from models.workloads.resnet50.model_tf import resnet50

    model = timed_input(tf, resnet50(tf.keras, args.image_size, args.num_classes, data_format), unpack)
    opt = tf.keras.optimizers.SGD(learning_rate=0.1 * args.batch_size * comm.size / 256, momentum=0.9)
    if hvd is not None and not engine_probe.active():  # the engine probe: no gradient averaging
        opt = hvd.DistributedOptimizer(opt)
    if args.precision == "fp16":
        # Loss scaling outermost: Horovod re-creates the optimizer it wraps from its config, which a
        # LossScaleOptimizer (built around an inner optimizer) does not survive; unscaled gradients reach
        # Horovod's apply_gradients and are averaged there.
        opt = tf.keras.mixed_precision.LossScaleOptimizer(opt)
    model.compile(optimizer=opt, loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


# --- step -----------------------------------------------------------------------------------------------------------
def windows_callback(args, tf, model, loop: WindowLoop):
    """A callback that makes batches [warmup + k*steps, warmup + (k+1)*steps) measured window k."""

    class Windows(tf.keras.callbacks.Callback):
        waited_at_open = 0.0

        def on_train_batch_begin(self, batch, logs=None):
            i = batch - args.warmup_steps
            if i >= 0 and i % args.steps == 0:
                loop.open()
                self.waited_at_open = model.input_wait_s

        def on_train_batch_end(self, batch, logs=None):
            i = batch - args.warmup_steps
            if i < 0:
                return
            loss = float(logs["loss"])  # reading the loss waits for the step
            loop.step_done(args.batch_size)
            extra = {"input_wait_s": model.input_wait_s - self.waited_at_open} if args.data == "imagenet" else None
            if (i + 1) % args.steps == 0 and not loop.close(i // args.steps, loss, extra):
                self.model.stop_training = True

    return Windows()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(__doc__, argv)
    from models.data.layout import DataError
    from models.probes.envprobe import probe_tensorflow
    from models.workloads.resnet50.tf_env import start

    tf, hvd_tf, comm, threads, on_gpu, data_format = start(args, "keras")
    hvd = None
    if hvd_tf is not None:
        import horovod.tensorflow.keras as hvd  # the same Horovod core, initialised by start()

    def measure(args) -> int:
        """The model, its data and model.fit's windows (the cell's, or the engine probe's: engine_probe.active())."""
        tf.random.set_seed(1234)  # the model's initial weights
        dataset, unpack, counter = synthetic_dataset(args, tf, comm, data_format), (lambda batch: batch), None
        if args.data == "imagenet":
            dataset, unpack, counter = imagenet_dataset(args, tf, comm)
        model = compiled_model(args, tf, hvd, comm, data_format, unpack)

        base = record_base(args, "keras", VERSION, data_format=data_format, threads_per_worker=threads,
                           device="gpu" if on_gpu else "cpu", engine="horovod" if hvd else "none",
                           env_probe=probe_tensorflow(hvd_tf, "keras"), data=args.data)
        if args.data == "imagenet":
            base["data_layout"] = args.data_layout
        loop = WindowLoop(args, comm, lambda: None, base)
        callbacks = [windows_callback(args, tf, model, loop)]
        if hvd is not None:
            callbacks.insert(0, hvd.callbacks.BroadcastGlobalVariablesCallback(0))
        if hvd is not None and engine_probe.active():
            callbacks.insert(1, probe_ping(tf, hvd_tf))
        try:  # (model.fit itself catches StopIteration: a dry pipeline ends training early, with fewer windows)
            model.fit(dataset, steps_per_epoch=args.warmup_steps + args.repeats * args.steps, epochs=1,
                      callbacks=callbacks, verbose=0)
        except DataError as e:
            fail(str(e))
        if counter is not None and not engine_probe.active():  # the cell's own input, not the probe's
            report_dropped(comm.rank, counter.bad, counter.consumed)
        if hvd is not None and engine_probe.active() and not loop.failed:
            # one step's gradients as Horovod's Keras optimizer sends them: one grouped allreduce, a tensor a variable
            bufs = [tf.ones_like(v) for v in model.trainable_variables]
            # (arguments, not captured constants: Horovod names the group after its graph tensors)
            grouped = tf.function(lambda *ts: hvd_tf.grouped_allreduce(list(ts), op=hvd_tf.Average)[0])
            engine_probe.report_timings(comm, args.out, 4 * sum(int(tf.size(b)) for b in bufs),
                                        lambda: float(tf.reduce_sum(grouped(*bufs))))
        return 1 if loop.failed else 0

    # the engine probe first where the control plane asks for it (models/probes/engine_probe.py), then the cell
    code = engine_probe.first_then(args, comm.rank, measure)
    if hvd is not None:
        hvd.shutdown()
    return code


def probe_ping(tf, hvd):
    """The engine probe's one small collective a step (models/probes/engine_probe.py), after each batch."""

    class Ping(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            hvd.allreduce(tf.zeros([1]), name="bench_engine_probe")

    return Ping()


if __name__ == "__main__":
    sys.exit(main())
