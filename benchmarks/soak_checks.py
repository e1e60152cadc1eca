"""The soak's checks of a faulted job's quality: AUC and log loss against the fault-free runs', and the base rate.

`benchmarks.soak` runs the jobs and calls these with their results (any
object with `metrics`, the chief's metrics file: `auc`, `logloss`, and
`dirs`, its folders: `progress`).
"""

import dataclasses
import glob
import json
import math
import os
from typing import Dict, List, Mapping, Protocol, Sequence

from benchmarks.soak_config import AUC_TOLERANCE, LOGLOSS_TOLERANCE
from input_pipeline import schema

LIBSVM_SUFFIX = ".libsvm"


class WithMetrics(Protocol):
    """A job's result as the checks read it: its chief's metrics."""

    metrics: Dict
    dirs: Dict[str, str]


@dataclasses.dataclass
class Check:
    name: str
    passed: bool
    detail: str


def check_auc(strategy: str, references: Sequence[WithMetrics], soak: WithMetrics) -> Check:
    """The faulted job's AUC against the nearest fault-free run's.

    Synchronous jobs: within `AUC_TOLERANCE` either way. Asynchronous `ps`:
    at most `AUC_TOLERANCE` below. Its workers' updates are stale by the
    other workers' steps; after every start the chief trains alone until the
    others have joined, and each task trains as fast as it can, so a job
    restarted many times trains another share of its steps per task, with
    less staleness, and ends above the uninterrupted job (docs/reliability.md:
    one worker alone on the same budget ends 0.033 above two). The detail
    gives the steps each task trained in both jobs.
    """
    auc = soak.metrics.get("auc")
    reference_aucs: List[float] = [r.metrics["auc"] for r in references if r.metrics.get("auc") is not None]
    asynchronous = strategy == "ps"
    name = ("AUC at most %.3f below the reference's" if asynchronous else "AUC within %.3f of the reference") \
        % AUC_TOLERANCE
    if auc is None or not reference_aucs:
        return Check(name, False, "no AUC")
    nearest = min(reference_aucs, key=lambda value: abs(value - auc))
    detail = "%.4f against %.4f (%+.4f)" % (auc, nearest, auc - nearest)
    if len(reference_aucs) > 1:
        detail += " (fault-free runs: %s, spread %.4f)" % (", ".join("%.4f" % a for a in reference_aucs),
                                                           max(reference_aucs) - min(reference_aucs))
    if asynchronous:
        detail += "; steps per task: %s; fault-free: %s" % (
            format_steps(steps_per_task(soak.dirs["progress"])),
            format_steps(steps_per_task(references[0].dirs["progress"])))
        return Check(name, auc - nearest >= -AUC_TOLERANCE, detail)
    return Check(name, abs(auc - nearest) <= AUC_TOLERANCE, detail)


def base_rate_logloss(data_dir: str) -> float:
    """The validation log loss of a model that predicts the validation split's positive rate for every row.

    A model that does not beat it learned nothing from the features (or
    overfit them), and faults cannot be told from its noise.

    Raises:
      ValueError: no labelled rows (`<split>/*.libsvm`) in the validation split.
    """
    positives = rows = 0
    for path in sorted(glob.glob(os.path.join(data_dir, schema.VALIDATION_SPLIT, "*" + LIBSVM_SUFFIX))):
        with open(path) as f:
            for line in f:
                label = line.split(" ", 1)[0]
                if label.strip():
                    rows += 1
                    positives += float(label) > 0
    if not rows or positives in (0, rows):
        raise ValueError("no base rate in %s: %d labelled row(s), %d positive, in its %s/*%s files; generate the "
                         "data with common.ensure_data" % (data_dir, rows, positives, schema.VALIDATION_SPLIT,
                                                          LIBSVM_SUFFIX))
    rate = positives / rows
    return -(rate * math.log(rate) + (1 - rate) * math.log(1 - rate))


def check_base_rate(references: Sequence[WithMetrics], base_rate: float) -> Check:
    """Every fault-free run's validation log loss is below the base rate's: the model learned, not overfit."""
    name = "fault-free log loss below the base rate's"
    if any(r.metrics.get("logloss") is None for r in references):
        return Check(name, False, "no log loss in a fault-free run")
    losses: List[float] = [r.metrics["logloss"] for r in references]
    return Check(name, max(losses) < base_rate, "%s against %.4f (predicting the positive rate)" % (
        ", ".join("%.4f" % loss for loss in losses), base_rate))


def check_logloss(strategy: str, references: Sequence[WithMetrics], soak: WithMetrics) -> Check:
    """The faulted job's log loss against the nearest fault-free run's (as `check_auc`, lower is better).

    Synchronous jobs: within `LOGLOSS_TOLERANCE` either way. Asynchronous
    `ps`: at most `LOGLOSS_TOLERANCE` above (see `check_auc` for why it may
    end better).
    """
    loss = soak.metrics.get("logloss")
    reference_losses: List[float] = [r.metrics["logloss"] for r in references
                                     if r.metrics.get("logloss") is not None]
    asynchronous = strategy == "ps"
    name = ("log loss at most %.3f above the reference's" if asynchronous
            else "log loss within %.3f of the reference") % LOGLOSS_TOLERANCE
    if loss is None or not reference_losses:
        return Check(name, False, "no log loss")
    nearest = min(reference_losses, key=lambda value: abs(value - loss))
    detail = "%.4f against %.4f (%+.4f)" % (loss, nearest, loss - nearest)
    if len(reference_losses) > 1:
        detail += " (fault-free runs: %s)" % ", ".join("%.4f" % value for value in reference_losses)
    if asynchronous:
        return Check(name, loss - nearest <= LOGLOSS_TOLERANCE, detail)
    return Check(name, abs(loss - nearest) <= LOGLOSS_TOLERANCE, detail)


def steps_per_task(progress_dir: str) -> Dict[str, int]:
    """The steps each task trained over every start of the job, from its progress file (`{task}.jsonl`).

    A task's file gathers its records of every start; its own step count
    starts again at each start (a record of no more steps than the one
    before begins a start). The steps of a start after its last record
    (fewer than `soak.LOG_EVERY_STEPS`) are not counted.
    """
    steps: Dict[str, int] = {}
    # Each line's "step" alone (`deepfm.runtime.hooks.read_progress_file` reads whole records, but imports
    # TensorFlow, which the soak's own process does without).
    for path in sorted(glob.glob(os.path.join(progress_dir, "*.jsonl"))):
        total = last = 0
        with open(path) as f:
            for line in f:
                if not line.strip():
                    continue
                step = json.loads(line)["step"]
                if step <= last:
                    total += last
                last = step
        steps[os.path.basename(path)[:-len(".jsonl")]] = total + last
    return steps


def format_steps(steps: Mapping[str, int]) -> str:
    return ", ".join("%s %d" % (task, count) for task, count in sorted(steps.items())) or "none recorded"
