"""Where a resumed run picks its input up, and how many examples its step budget still holds.

A run that resumes from a checkpoint at global step g has trained on the
examples of the steps before g. Its input must go on after them, and its
budget must count the examples still to come:

* **Examples, not steps.** How many examples a global step consumes depends
  on the job: a synchronous job of n workers at batch b takes n * b per
  step, asynchronous parameter servers b (each global step is one worker's
  step), and an elastic restart changes n. The chief records, in
  `<model_dir>/input_position.json`, the examples per global step from each
  start on (`Segment`s); a start at step g drops the segments of the steps
  from g on (they were lost with the process that made them) and adds its
  own when its rate differs. `examples_at(segments, g)` adds them up.
* **The input skips what was trained.** Each worker's dataset skips its
  share of those examples, `examples / (workers * batch)` batches of its
  shard, modulo the batches of one pass over the shard (without a shuffle
  every pass yields the same batches). A synchronous job restarted at the
  same size so trains on exactly the batches of an uninterrupted run at every
  step. Asynchronous workers are taken to have progressed alike (each one's
  own position is not in the checkpoint): the count is exact, the rows are
  those of the workers' average position. After a resize each rank skips its
  share of the same count in its new shard: the count is exact, the rows are
  the same where the records are dealt out one by one (`Dataset.shard`) and
  close to them where whole files are. With a shuffle every pass reshuffles,
  so the passes after a restart come in another order than an uninterrupted
  run's.
* **The budget is in examples.** The run's own budget (`num_epochs` passes
  over the smallest shard, or `--max_steps`, in this run's global steps)
  times its examples per step, less the examples already trained, gives the
  steps still to train: an uninterrupted run, a restarted one and a resized
  one all end after the same number of examples. A run resumed at or past its
  budget trains no step (then evaluates and exports: what a job killed during
  its final evaluation or export still had to do).

Skipping reads and decodes the skipped batches (at most one pass over the
shard): about 3 microseconds a row with the defaults.

A model directory without the record (written before it existed) counts its
steps at this run's rate.
"""

import dataclasses
import json
import os
from typing import List, Optional, Sequence

POSITION_FILE = "input_position.json"
FORMAT_VERSION = 1


@dataclasses.dataclass(frozen=True)
class Segment:
    """The examples every global step from `from_step` on consumed (until the next segment).

    Attributes:
      from_step: the global step the run that trained them started at.
      examples_per_step: examples one global step consumed, every worker together.
    """

    from_step: int
    examples_per_step: int


@dataclasses.dataclass(frozen=True)
class ResumePlan:
    """Where this run's input starts and the global step it trains to.

    Attributes:
      resumed_step: the global step of the checkpoint it resumes from (0: none).
      examples_done: the examples the steps before it consumed.
      examples_budget: the examples of the whole job's budget.
      max_steps: the global step training stops at (`resumed_step` when the
        budget is already reached: no step to train).
      skip_batches: batches each worker's input skips before its first step
        (before the modulo of one pass; `skip_in_pass`).
    """

    resumed_step: int
    examples_done: int
    examples_budget: int
    max_steps: int
    skip_batches: int

    @property
    def budget_reached(self) -> bool:
        return self.max_steps <= self.resumed_step

    def skip_in_pass(self, batches_per_pass: Optional[int]) -> int:
        """The batches to skip in a dataset whose passes hold `batches_per_pass` batches (None: unknown)."""
        if not batches_per_pass:
            return self.skip_batches
        return self.skip_batches % batches_per_pass


def path(model_dir: str) -> str:
    """Where `model_dir`'s record goes."""
    return os.path.join(model_dir, POSITION_FILE)


def read(model_dir: str) -> List[Segment]:
    """The segments recorded in `model_dir`, in step order; none where there is no record.

    Raises:
      ValueError: the file is not a record of this package; the message names it.
    """
    target = path(model_dir)
    if not os.path.isfile(target):
        return []
    try:
        with open(target) as f:
            record = json.load(f)
        if record.get("format_version") != FORMAT_VERSION:
            raise ValueError("format_version %r, expected %d" % (record.get("format_version"), FORMAT_VERSION))
        segments = [Segment(int(s["from_step"]), int(s["examples_per_step"])) for s in record["segments"]]
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError("%s is not an input position record of this package (%s): move it away, and a resumed "
                         "run counts its steps at its own rate" % (target, e)) from e
    return sorted(segments, key=lambda segment: segment.from_step)


def examples_at(segments: Sequence[Segment], step: int, default_per_step: int) -> int:
    """The examples the global steps before `step` consumed.

    Args:
      segments: the record, in step order.
      step: a global step.
      default_per_step: the rate of steps before the first segment (a
        model directory written before the record existed).
    """
    total = 0
    edge = step
    for segment in reversed([s for s in segments if s.from_step < step]):
        total += (edge - segment.from_step) * segment.examples_per_step
        edge = segment.from_step
    return total + edge * default_per_step


def plan(segments: Sequence[Segment], resumed_step: int, examples_per_step: int, budget_steps: int,
         workers: int, batch: int) -> ResumePlan:
    """Where a run resumed at `resumed_step` starts and what it trains to.

    Args:
      segments: the model directory's record (`read`).
      resumed_step: the global step of the checkpoint resumed from (0: none).
      examples_per_step: this run's examples per global step.
      budget_steps: this run's step budget in its own global steps, as if it
        started from scratch.
      workers: the workers that each read a share of the examples.
      batch: examples of one batch of a worker's dataset.

    Raises:
      ValueError: a rate, worker count or batch below 1.
    """
    for name, value in (("examples per step", examples_per_step), ("workers", workers), ("batch", batch)):
        if value < 1:
            raise ValueError("%s must be >= 1, got %r" % (name, value))
    done = examples_at(segments, resumed_step, examples_per_step)
    budget = budget_steps * examples_per_step
    remaining_steps = -(-max(0, budget - done) // examples_per_step)
    return ResumePlan(resumed_step=resumed_step, examples_done=done, examples_budget=budget,
                      max_steps=resumed_step + remaining_steps, skip_batches=done // (workers * batch))


def record(model_dir: str, segments: Sequence[Segment], resumed_step: int, examples_per_step: int) -> List[Segment]:
    """Records that the steps from `resumed_step` on consume `examples_per_step` each (the chief, at its start).

    The segments of steps from `resumed_step` on are dropped; the file is
    rewritten (atomically) only where that changes it.

    Returns:
      The segments now recorded.
    """
    kept = [s for s in segments if s.from_step < resumed_step]
    if not kept and resumed_step:
        # Steps made before the record existed: counted at this run's rate.
        kept = [Segment(0, examples_per_step)]
    if not kept or kept[-1].examples_per_step != examples_per_step:
        kept.append(Segment(resumed_step, examples_per_step))
    if kept != list(segments):
        target = path(model_dir)
        with open(target + ".tmp", "w") as f:
            json.dump({"format_version": FORMAT_VERSION, "segments": [dataclasses.asdict(s) for s in kept]},
                      f, indent=1, sort_keys=True)
        os.replace(target + ".tmp", target)
    return kept
