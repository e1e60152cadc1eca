"""The step budget a training job of several workers runs, as the library computes it."""

import glob
import os

import tensorflow as tf

from input_pipeline import pipeline, schema


def steps_per_worker(data_root: str, batch_size: int, workers: int, epochs: int) -> int:
    """Each worker's steps on the TFRecord training split of `data_root` ("Step budget", input_pipeline/pipeline.py).

    The smallest shard's full batches, times the epochs: ranks in lockstep end
    at that global step, asynchronous parameter-server workers add theirs up.

    Raises:
      ValueError: the workers' shards give them different budgets (the library gives every worker one).
    """
    builder = pipeline.DatasetBuilder(
        sorted(glob.glob(os.path.join(data_root, schema.TRAIN_SPLIT, "*.tfrecord"))),
        pipeline.PipelineConfig(), batch_size=batch_size, num_epochs=None)
    steps = {builder.steps_per_epoch(tf.distribute.InputContext(workers, index)) for index in range(workers)}
    if len(steps) != 1 or None in steps:
        raise ValueError("the %d workers' budgets differ or are unknown: %s" % (workers, sorted(map(str, steps))))
    return steps.pop() * epochs
