"""`InputPlan`: how one process of a training job reads its input, as its strategy says.

`Strategy.input_plan()` returns it once the process is set up: one value
instead of six questions put to each adapter. The trainer's input
(`deepfm.runtime.training_input`) and evaluation (`deepfm.runtime.evaluation`)
read it::

    plan = strategy.input_plan()
    builder = pipeline.DatasetBuilder(files, plan.batch_per_input_pipeline(batch), ...)
    dataset = builder(plan.context)

The defaults describe one process on one device reading every row.
"""

import dataclasses
from typing import Callable, Optional

import tensorflow as tf

from input_pipeline import pipeline

InputFn = Callable[..., tf.data.Dataset]
# `InputPlan.channel_error` where no `--train_channels` are given.
NO_CHANNEL = "--input_mode pipe needs --train_channels (one channel per worker on a host)"


def _whole_dataset(dataset: tf.data.Dataset) -> tf.data.Dataset:
    """A training dataset as it is: training stops at the end of the data."""
    return dataset


def _every_row(builder: pipeline.DatasetBuilder) -> InputFn:
    """The `input_fn` of every validation row `builder` reads, on this one process."""
    return builder.input_fn()


@dataclasses.dataclass(frozen=True)
class InputPlan:
    """How one process reads its training and validation input.

    Attributes:
      context: the shard of the input this process reads and its replica
        count.
      replicas_per_batch: replica batches one batch of this process's
        dataset holds: 1 by default; the tower method feeds all its towers
        from one dataset and so reads their batches together.
      batches_per_step: batches of this process's dataset that one global
        step consumes: 1 by default; MirroredStrategy takes one per replica.
      channel: the Pipe-mode training channel this process reads; None:
        none fits it (`pipe_channel` raises `channel_error`).
      channel_error: why `channel` is None, the message of `pipe_channel`'s
        error: by default, that no `--train_channels` are given.
      global_steps_per_step: global steps one step of each worker adds up to
        over the job: 1 where the workers step together (synchronous
        strategies); the count of workers where each advances the shared
        global step on its own (asynchronous parameter servers).
      finite_input: prepares a training dataset that ends by itself (Pipe
        mode without a step budget). By default training simply stops at the
        end of the data; processes that must stop at the same step (Horovod
        ranks) mark the last batch and agree on stopping in their model_fn
        wrapper.
      evaluation_input_fn: the Estimator `input_fn` of this process's
        evaluation of the validation rows a `DatasetBuilder` reads. By
        default every row, on this one process; processes that evaluate
        together (Horovod ranks) read a shard each and sum their metric state
        (`strategies.sharded_evaluation`).
    """

    context: tf.distribute.InputContext
    replicas_per_batch: int = 1
    batches_per_step: int = 1
    channel: Optional[str] = None
    channel_error: str = NO_CHANNEL
    global_steps_per_step: int = 1
    finite_input: Callable[[tf.data.Dataset], tf.data.Dataset] = _whole_dataset
    evaluation_input_fn: Callable[[pipeline.DatasetBuilder], InputFn] = _every_row

    def batch_per_input_pipeline(self, per_replica_batch: int) -> int:
        """Examples per batch of this process's dataset: `per_replica_batch` times `replicas_per_batch`."""
        return per_replica_batch * self.replicas_per_batch

    def pipe_channel(self) -> str:
        """The Pipe-mode training channel this process reads.

        Raises:
          ValueError: no channel is configured for this worker (the one
            check that Pipe mode has its channels): `channel_error`.
        """
        if self.channel is None:
            raise ValueError(self.channel_error)
        return self.channel

    def global_max_steps(self, steps_per_worker: int) -> int:
        """The global step at which training stops, given each worker's steps (a pure rule)."""
        return steps_per_worker * self.global_steps_per_step
