"""What a run checks before it writes anything, its first writes, and where it starts.

The trainer (`deepfm.runtime.trainer`) runs every check first: the model
directory (`resume_point`: readable checkpoints, the model's shapes) and the
input (`check_data`: every file read once, `input_pipeline.data_check`).
Only then does the chief write (`prepare_model_dir`: what saves cut short
left is removed, the state file points at the checkpoint resumed from), so
a refused run leaves the model directory byte for byte as it was. Then
`resume_plan` says where the input starts and the global step training
ends at (`deepfm.runtime.input_position`).

Before all of them, every process estimates what it will hold in memory
against what its host gives it (`check_memory`, `strategies.memory_estimate`,
`strategies.host_memory`), so that a model too large for its host is refused
before anything is written and before the first step, not killed by the
kernel's OOM killer after hours of training.

Processes that must train the same steps (Horovod ranks) agree through
`combined`: a collective every one of them makes at the same point.
"""

import dataclasses
import os
import time
from typing import List, Optional, Sequence, Tuple, Type

import tensorflow as tf
from absl import logging

import strategies
from deepfm import models
from deepfm.config import ModelConfig, TrainConfig
from deepfm.models import ctr
from deepfm.runtime import checkpoints, input_position
from deepfm.runtime import console as console_lib
from input_pipeline import check_record, data_check, pipeline
from strategies import context as context_lib
from strategies import host_memory, memory_estimate
from strategies import strategy as strategy_lib

# The name of the collective of `combined`.
AGREEMENT_NAME = "preflight_agreement"
# Above this share of what a process may use, `check_memory` warns; above all of it, it refuses.
MEMORY_WARNING_SHARE = 0.9
# How to export a model directory's checkpoint later, on a host that can hold the weights.
EXPORT_COMMAND = "python -m deepfm.export --model_dir %s --export_dir %s"


def resume_point(model_dir: str, model: Optional[ModelConfig] = None,
                 model_fn: Optional[context_lib.ModelFn] = None) -> Optional[str]:
    """The checkpoint training resumes from (None: a new model directory), changing nothing in `model_dir`.

    Unreadable checkpoints are skipped and, with `model`, a checkpoint of
    another model shape is refused (see `deepfm.runtime.checkpoints`). A
    missing `model_dir` is created.

    Raises:
      ValueError: `model_dir` is a file or cannot be written, none of its
        checkpoints is readable, or its checkpoint holds another model shape.
    """
    if os.path.exists(model_dir) and not os.path.isdir(model_dir):
        raise ValueError("--model_dir %r exists and is not a directory" % model_dir)
    try:
        os.makedirs(model_dir, exist_ok=True)
    except OSError as e:
        raise ValueError("--model_dir %r cannot be created: %s" % (model_dir, e)) from e
    if not os.access(model_dir, os.W_OK | os.X_OK):
        raise ValueError("--model_dir %r is not writable" % model_dir)
    checkpoint = checkpoints.resume_checkpoint(model_dir, repair=False)
    if checkpoint is not None and model is not None:
        checkpoints.check_model_shapes(checkpoint, model, model_fn or models.get(model.model))
    return checkpoint


def prepare_model_dir(model_dir: str, checkpoint: Optional[str]) -> None:
    """The chief's first writes: what saves cut short left is removed, the state file points at `checkpoint`."""
    checkpoints.remove_partial_files(model_dir)
    if checkpoint is not None:
        checkpoints.repair_state(model_dir, checkpoint)


def check_data(train: TrainConfig, model: ModelConfig, input_config: pipeline.PipelineConfig,
               eval_config: pipeline.PipelineConfig, strategy: strategy_lib.Strategy,
               context: tf.distribute.InputContext) -> None:
    """Reads the input whole once before anything is written (`input_pipeline.data_check`).

    Each process checks its share of the training files (the chief also the
    validation files). Horovod ranks then agree (a collective every rank
    makes here), so that all stop when one found a problem; where processes
    do not agree (parameter servers), the chief checks every training file
    itself, as it alone writes to the model directory.

    Files already checked, unchanged since, are not read again
    (`input_pipeline.check_record`): each process adds the files it read to
    the record beside the data where the job owns the dataset's directory;
    else (a SageMaker input channel, a read-only or another user's folder,
    `train.data_check_record` `model_dir`) to the dataset's record in the
    model directory, and only when the whole check passed.

    Raises:
      ValueError: a file's problem, named by `data_check`; or, on the other
        ranks, that another rank found one.
    """
    files = list(train.train_files)
    own = files[context.input_pipeline_id::context.num_input_pipelines]
    start = time.monotonic()
    record = check_record.CheckRecord(train.model_dir, place=train.data_check_record)
    error = None
    try:
        data_check.check_files(own, input_config, model.feature_size, record=record)
        if strategy.topology.is_chief and train.val_files:
            data_check.check_files(train.val_files, eval_config, model.feature_size,
                                   role="validation", record=record)
    except data_check.DataCheckError as e:
        error = e
    agreed = combined(strategy, (int(error is not None),))
    if error is None and agreed is None and strategy.topology.is_chief:
        try:
            data_check.check_files([path for path in files if path not in own], input_config, model.feature_size,
                                   record=record)
        except data_check.DataCheckError as e:
            error = e
    refused = error is not None or (agreed is not None and agreed[0] != 0)
    record.save(model_dir=not refused)
    if error is not None:
        raise error
    if agreed is not None and agreed[0]:
        raise ValueError("another process's check of the input found a problem (its log names it); nothing "
                         "was written to --model_dir %r" % train.model_dir)
    logging.info("checked the input in %.1f s (--check_data)", time.monotonic() - start)


def resume_plan(train: TrainConfig, strategy: strategy_lib.Strategy, resumed_step: Optional[int],
                 steps: int, budget: int, batch: int, per_step: int) -> input_position.ResumePlan:
    """Where this run's input starts and the global step it trains to (`deepfm.runtime.input_position`).

    Horovod ranks take rank 0's plan (a collective every rank makes here):
    they must train the same steps on the same position.
    """
    workers = strategy.topology.workers
    per_global_step = batch * per_step * workers * steps // budget
    segments = input_position.read(train.model_dir)
    plan = input_position.plan(segments, resumed_step or 0, per_global_step, budget, workers, batch)
    mine = (plan.resumed_step, plan.max_steps, plan.skip_batches)
    agreed = combined(strategy, mine if strategy.topology.is_chief else (0, 0, 0))
    if agreed is not None and agreed != mine:
        plan = dataclasses.replace(plan, resumed_step=agreed[0], max_steps=agreed[1], skip_batches=agreed[2])
    if strategy.topology.is_chief:
        input_position.record(train.model_dir, segments, plan.resumed_step, per_global_step)
    return plan


def combined(strategy: strategy_lib.Strategy, values: Sequence[int]) -> Optional[Tuple[int, ...]]:
    """Each of `values` (int32) as its largest over the processes in lockstep (`Strategy.agree_max`); None alone."""
    if not strategy.topology.lockstep:
        return None
    return strategy.agree_max(tuple(values), name=AGREEMENT_NAME)


def check_memory(train: TrainConfig, model: ModelConfig, strategy: strategy_lib.Strategy,
                 model_fn: context_lib.ModelFn, console: Optional[console_lib.Console] = None,
                 memory: Optional[host_memory.HostMemory] = None) -> bool:
    """Refuses, before anything is written, a process whose estimated memory its host cannot give it.

    The model's state is measured from its graph, built once and never
    initialized (`memory_estimate.model_state`); the strategy says what this
    process holds of it (`Strategy.memory`), against what this
    process may use (`host_memory.read`: its memory cgroup's limit, else the
    host's available memory; shared equally by the training processes of
    one host). Above `MEMORY_WARNING_SHARE` of it the run warns; above all of
    it, it is refused in one line: the bytes needed and their parts, the
    bytes available and where that figure came from, and the strategies and
    process counts that fit in hosts like this one (each registered
    strategy asked for its estimate at a count: `smallest_scale`). Horovod
    ranks agree (a collective every rank makes here), so all stop when one
    is refused.

    The chief that exports also checks that its host holds the weights
    alone (`memory_estimate.export_memory`); where it does not, it says so
    now and the job leaves the export to `EXPORT_COMMAND`.

    Args:
      train: the run (its batch, model and export directories).
      model: the model's hyperparameters.
      strategy: this process's strategy, set up.
      model_fn: the model function.
      console: where the warnings are printed too; None: the log only.
      memory: what this process's host gives it; default: `host_memory.read()`.

    Returns:
      Whether this process exports in-process (False only on a chief whose
      host cannot hold the weights, after the warning).

    Raises:
      ValueError: this process's estimate exceeds its memory; or, on the
        other ranks, another rank's did.
    """
    console = console or console_lib.Console(enabled=False)
    topology = strategy.topology
    memory = memory or host_memory.read()
    error = None
    exports = True
    if memory is None:
        logging.warning("this host gives no figure of its memory (no memory cgroup limit, no /proc/meminfo): "
                        "memory not checked (--check_memory)")
    else:
        state = memory_estimate.model_state(model_fn, ctr.model_params(model), model.field_size)
        ids_per_step = train.batch_size * model.field_size
        share = memory.available // topology.workers_per_host
        available = _available(memory, topology.workers_per_host)
        mine = strategy.memory(state, ids_per_step).estimates()[topology.role]
        if mine.needed > share:
            error = ("not enough memory for --strategy %s, process %s: it needs an estimated %s, and %s; %s; "
                     "nothing was written to --model_dir %r; --check_memory=false trains anyway"
                     % (strategy.name, topology.task, mine.describe(), available,
                        _what_fits(strategy, state, ids_per_step, memory.available), train.model_dir))
        else:
            line = "memory of %s, process %s: an estimated %s, and %s" % (
                strategy.name, topology.task, mine.describe(), available)
            if mine.needed > MEMORY_WARNING_SHARE * share:
                line += "; within %d%% of the limit: the kernel may end it" % round(100 * (1 - MEMORY_WARNING_SHARE))
                logging.warning("%s", line)
                console.line(line)
            else:
                logging.info("%s", line)
        if error is None and topology.is_chief and train.export_dir:
            export = memory_estimate.export_memory(state)
            if export.needed > share:
                exports = False
                message = ("this host cannot hold the model's weights for the export: it needs an estimated %s, and "
                           "%s; this job will not export in-process: once trained, export on a host that can with "
                           "%s" % (export.describe(), available, export_command(train)))
                logging.warning("%s", message)
                console.line(message)
    agreed = combined(strategy, (int(error is not None),))
    if error is not None:
        raise ValueError(error)
    if agreed is not None and agreed[0]:
        raise ValueError("another process's memory check refused the run (its log names the bytes); nothing was "
                         "written to --model_dir %r; --check_memory=false trains anyway" % train.model_dir)
    return exports


def export_command(train: TrainConfig) -> str:
    """`EXPORT_COMMAND` for this run's model and export directories."""
    return EXPORT_COMMAND % (train.model_dir, train.export_dir)


def _available(memory: host_memory.HostMemory, processes_per_host: int) -> str:
    """What this process may use, in words: the figure, its source and its share of the host."""
    if processes_per_host == 1:
        return "%s is available (%s)" % (memory_estimate.format_bytes(memory.available), memory.source)
    return "%s of the %s available (%s) is its share as one of %d training processes of this host" % (
        memory_estimate.format_bytes(memory.available // processes_per_host),
        memory_estimate.format_bytes(memory.available), memory.source, processes_per_host)


def _what_fits(strategy: strategy_lib.Strategy, state: memory_estimate.ModelState, ids_per_step: int,
               budget: int) -> str:
    """The strategies that spread the model over processes, each at the smallest count that fits `budget` each."""
    found = []
    for candidate in _spreading_strategies(strategy, state, ids_per_step):
        share = candidate.memory(state, ids_per_step)
        count = memory_estimate.smallest_scale(share.estimates, budget)
        if count is not None:
            found.append("%s %s" % (candidate.name, share.scale % count))
    if not found:
        return ("no strategy fits in up to %d hosts like this one: give each process more memory"
                % memory_estimate.MAX_SCALE)
    return "what fits in hosts like this one, one process each: " + ", ".join(found)


def _spreading_strategies(strategy: strategy_lib.Strategy, state: memory_estimate.ModelState,
                          ids_per_step: int) -> List[strategy_lib.Strategy]:
    """One of each registered adapter whose processes hold less as there are more (`MemoryShare.spreads`).

    This process's own strategy, with its options, where it is one of them;
    the others with their defaults (built only: building touches nothing).
    """
    classes: List[Type[strategy_lib.Strategy]] = []
    for name in strategies.names():
        adapter = strategies.adapter_class(name)
        if adapter not in classes:
            classes.append(adapter)
    candidates = [strategy if type(strategy) is adapter
                  else strategies.get(strategies.StrategyConfig(name=adapter.name)) for adapter in classes]
    return [candidate for candidate in candidates if candidate.memory(state, ids_per_step).spreads]
