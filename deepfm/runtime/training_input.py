"""What one training process reads: its source and shard, its batch, and its step budget.

The step budget: every worker runs the same number of steps, so that no
Horovod rank waits on another that ran out of data. With `max_steps` unset,
each worker runs `num_epochs * steps_per_epoch` steps, where
`steps_per_epoch` is the number of full batches of the *smallest* input
shard (from the row counts in the dataset's metadata). The strategy maps
that to the global step at which training stops (`RunSettings.max_steps`,
set by `Strategy.prepare`; asynchronous parameter servers add up every
worker's steps: `InputPlan.global_max_steps`). A Pipe-mode channel of
unknown size has no budget: each epoch ends with its FIFO.
"""

import dataclasses
from typing import Callable, Optional

import tensorflow as tf

from deepfm.config import TrainConfig
from deepfm.runtime import hooks as hooks_lib
from input_pipeline import dataset as dataset_lib
from input_pipeline import pipeline
from strategies import strategy as strategy_lib

InputFn = Callable[[], tf.data.Dataset]


@dataclasses.dataclass(frozen=True)
class TrainingInput:
    """The training input of this process, as its strategy shards and batches it.

    Attributes:
      source: the files (File mode) or the channel (Pipe mode).
      context: this process's shard (`InputPlan.context`).
      builder: the dataset of the shard; repeating, or ending after
        `num_epochs` where the step budget is unknown.
      batches_per_step: dataset batches one global step consumes.
      steps_per_worker: each worker's step budget; None: until the input
        ends (a Pipe channel of unknown size).
      skip_batches: the batches of its shard trained before the run resumed
        (`deepfm.runtime.input_position`), skipped modulo one pass over it.
      dataset: the dataset the files come from, its metadata read once
        (`Dataset.open`) and handed to the input pipelines; None: each
        pipeline finds the metadata beside its files.
    """

    source: pipeline.Source
    context: tf.distribute.InputContext
    builder: pipeline.DatasetBuilder
    batches_per_step: int
    steps_per_worker: Optional[int]
    skip_batches: int = 0
    dataset: Optional[dataset_lib.Dataset] = None

    @classmethod
    def of(cls, train: TrainConfig, input_config: pipeline.PipelineConfig, strategy: strategy_lib.Strategy,
           dataset: Optional[dataset_lib.Dataset] = None) -> "TrainingInput":
        """The input of a set-up `strategy`'s process; `dataset` hands down the metadata read already.

        Raises:
          ValueError: the rows are unknown and `--max_steps` is unset, or the
            smallest shard holds less than one batch.
        """
        plan = strategy.input_plan()
        context = plan.context
        batch = plan.batch_per_input_pipeline(train.batch_size)
        pipe = input_config.input_mode == pipeline.INPUT_MODE_PIPE
        source = plan.pipe_channel() if pipe else train.train_files
        known = dataset.pipeline_args(train.train_files) if dataset is not None and not pipe else {}
        builder = pipeline.DatasetBuilder(source, input_config, batch_size=batch, num_epochs=None, **known)
        per_step = plan.batches_per_step
        steps = _steps_per_worker(train, builder, context, per_step)
        if steps is None:
            # Pipe mode without row counts: each epoch ends with its FIFO.
            builder = pipeline.DatasetBuilder(source, input_config, batch_size=batch, num_epochs=train.num_epochs)
        return cls(source, context, builder, per_step, steps, dataset=dataset)

    @property
    def examples_per_step(self) -> int:
        """Examples one global step of this process trains on."""
        return self.builder.batch_size * self.batches_per_step

    def resumed_at(self, skip_batches: int) -> "TrainingInput":
        """This input going on after the `skip_batches` batches of its shard trained before the run resumed."""
        return dataclasses.replace(self, skip_batches=skip_batches)

    def batches_per_pass(self) -> Optional[int]:
        """Full batches one pass over this process's own shard yields; None where its rows are unknown."""
        plan = self.builder.shard_plan(self.context)
        if plan.rows_per_shard is None:
            return None
        return plan.rows_per_shard[plan.index] // self.builder.batch_size

    def _skip(self, batches: int, pass_batches: Optional[int]) -> int:
        return batches % pass_batches if pass_batches else batches

    def input_fn(self, finite_input: Callable[[tf.data.Dataset], tf.data.Dataset]) -> InputFn:
        """The input_fn of one pass; an input without a budget passes through `finite_input` (the strategy's)."""
        if self.steps_per_worker is None:
            return lambda: finite_input(self.builder(self.context))
        skip = self._skip(self.skip_batches, self.batches_per_pass())

        def input_fn():
            dataset = self.builder(self.context)
            return dataset.skip(skip) if skip else dataset
        return input_fn

    def continuing_input_fn(self, progress: hooks_lib.ProgressHook) -> InputFn:
        """An input_fn for training in rounds: each round goes on where the last one left the data.

        The dataset skips the batches trained before this run resumed
        (`skip_batches`) and those this process trained in earlier rounds,
        modulo one pass over its shard.
        """
        pass_batches = self.batches_per_pass()

        def input_fn():
            skip = self.skip_batches + progress.steps * self.batches_per_step
            return self.builder(self.context).skip(self._skip(skip, pass_batches))
        return input_fn

    def global_steps_per_epoch(self, max_steps: Optional[int]) -> Optional[int]:
        """Global steps of one epoch (for the console's `epoch e/N`); None when rows are unknown."""
        batches = self.builder.steps_per_epoch(self.context)
        if not batches or not self.steps_per_worker or not max_steps or batches < self.batches_per_step:
            return None
        return max(1, (batches // self.batches_per_step) * max_steps // self.steps_per_worker)


def _steps_per_worker(train: TrainConfig, builder: pipeline.DatasetBuilder,
                      context: tf.distribute.InputContext, batches_per_step: int) -> Optional[int]:
    """Each worker's step budget; None for a Pipe channel of unknown size (train to its end)."""
    if train.max_steps:
        return train.max_steps
    steps = builder.steps_per_epoch(context)
    if steps is None and builder.channel is not None:
        return None
    if steps is None:
        raise ValueError(
            "the number of rows of %s is unknown (no metadata.json beside the files, or Pipe mode): "
            "set --max_steps" % (", ".join(train.train_files) or "the input"))
    if steps == 0:
        raise ValueError(
            "the smallest input shard holds fewer rows than one batch of %d: lower --batch_size "
            "or use fewer workers" % builder.batch_size)
    return steps * train.num_epochs // batches_per_step
