"""Where a training step's time goes: traces of a few steps, as Chrome traces and a breakdown.

`StepTraceHook` runs `num_steps` training steps of this process, after
`warmup_steps`, with `RunOptions.FULL_TRACE` (one traced step every
`every_n_steps`; tracing slows the traced step itself, not the others) and
writes, with `task` the process's name in its job:

* `<task>-step<N>.trace.json`: step N as a Chrome trace (chrome://tracing or
  https://ui.perfetto.dev): one row per device and thread, one box per op,
  named by its op type, its node name in the arguments. Under parameter
  servers the ps devices' ops of the step are in it too.
* `<task>.summary.json`: `breakdown` of every traced step and their medians.

`breakdown` splits a traced step of this process's own devices:

* `span_ms`: first op start to last op end;
* `compute_ms`: the time some op that is not an exchange ran (the union of
  their intervals: overlapping ops count once);
* `exchange_only_ms`: the time only exchange ops ran (Horovod's collectives,
  the `_Send`/`_Recv` of a distributed session), i.e. this process waited on
  the exchange with nothing else to do;
* `idle_ms`: the span that no op covers;
* `gradients_done_ms`: when the last op of the backward pass (under
  `gradients/`) ended, from the span's start: what follows is the tail no
  compute of the step can hide (the exchange of the gradients backprop
  produced last, the embedding tables', and their apply);
* `op_ms_by_scope`: op time summed by the first component of the node name
  (`deepfm_model` forward, `gradients` backward, the optimizer's scope, the
  exchange's); ops that overlap each count in full, so the sum may exceed
  the span. Remote devices (a parameter server's) are under `remote:<job>`.
"""

import dataclasses
import json
import os
import statistics
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import tensorflow as tf
from absl import logging

from deepfm.runtime import critical_path

# Op types that move tensors between processes.
EXCHANGE_OP_TYPES = frozenset({
    "HorovodAllreduce", "HorovodAllgather", "HorovodBroadcast", "HorovodAlltoall", "HorovodReducescatter",
    "_Send", "_Recv", "_HostSend", "_HostRecv", "RecvTensor"})
GRADIENTS_SCOPE = "gradients"
REMOTE_PREFIX = "remote:"
TRACE_SUFFIX = ".trace.json"
SUMMARY_SUFFIX = ".summary.json"
MICROS_PER_MS = critical_path.MICROS_PER_MS
# `op_ms_by_scope` keeps the scopes with the most op time; the rest are summed under OTHER_SCOPES.
TOP_SCOPES = 8
OTHER_SCOPES = "(other)"
DEFAULT_EVERY_N_STEPS = 5
# A traced step's work and longest chain of dependent ops (`deepfm.runtime.critical_path`).
CRITICAL_PATH = "critical_path"
CRITICAL_PATH_MEASURES = ("work_ms", "critical_path_ms", "parallelism")
DEFAULT_WARMUP_STEPS = 20


@dataclasses.dataclass(frozen=True)
class OpRun:
    """One op's run in a traced step.

    Attributes:
      device: the device it ran on (`/job:worker/replica:0/task:0/device:CPU:0`).
      name: its node name.
      op: its op type.
      start_us: start, microseconds since the epoch.
      end_us: end, microseconds since the epoch.
      thread: the thread it ran on.
    """

    device: str
    name: str
    op: str
    start_us: int
    end_us: int
    thread: int

    @property
    def is_exchange(self) -> bool:
        return self.op in EXCHANGE_OP_TYPES

    @property
    def scope(self) -> str:
        return self.name.split("/", 1)[0]


def op_type(node_stats) -> str:
    """The op type of a `NodeExecStats`: from `timeline_label` (`name = Op(inputs)`), else the name."""
    label = node_stats.timeline_label
    if " = " in label:
        return label.split(" = ", 1)[1].split("(", 1)[0].strip()
    return node_stats.node_name.split(":", 1)[0]


def op_runs(step_stats) -> List[OpRun]:
    """The op runs of a `StepStats` proto (every device in it)."""
    runs = []
    for device in step_stats.dev_stats:
        for node in device.node_stats:
            start = node.all_start_micros
            runs.append(OpRun(device.device, node.node_name, op_type(node), start,
                              start + max(node.all_end_rel_micros, 0), node.thread_id))
    return runs


def _union_us(intervals: Iterable[Tuple[int, int]]) -> int:
    total, current = 0, None
    for start, end in sorted(intervals):
        if current is None or start > current[1]:
            if current is not None:
                total += current[1] - current[0]
            current = [start, end]
        else:
            current[1] = max(current[1], end)
    if current is not None:
        total += current[1] - current[0]
    return total


def _job(device: str) -> str:
    for part in device.split("/"):
        if part.startswith("job:"):
            return part[len("job:"):]
    return ""


def local_devices(runs: Sequence[OpRun], own_job: Optional[str]) -> List[str]:
    """The devices of this process: those of `own_job` (None: every device is local)."""
    devices = sorted({run.device for run in runs})
    if own_job is None:
        return devices
    return [device for device in devices if _job(device) in (own_job, "localhost", "")]


def breakdown(runs: Sequence[OpRun], own_job: Optional[str] = None) -> Dict:
    """The time split of one traced step (see the module docstring).

    Args:
      runs: the step's op runs.
      own_job: this process's job in a cluster (its devices are local, the
        others remote); None when every device is this process's.

    Raises:
      ValueError: no op of this process ran in the step.
    """
    local = set(local_devices(runs, own_job))
    mine = [run for run in runs if run.device in local]
    if not mine:
        raise ValueError("the traced step has no op on this process's devices (job %r; devices %s)"
                         % (own_job, sorted({run.device for run in runs})))
    start = min(run.start_us for run in mine)
    end = max(run.end_us for run in mine)
    compute = [(run.start_us, run.end_us) for run in mine if not run.is_exchange]
    every = [(run.start_us, run.end_us) for run in mine]
    covered = _union_us(every)
    compute_us = _union_us(compute)
    backward_ends = [run.end_us for run in mine if run.scope == GRADIENTS_SCOPE]
    by_scope: Dict[str, float] = {}
    for run in runs:
        key = run.scope if run.device in local else REMOTE_PREFIX + _job(run.device)
        by_scope[key] = by_scope.get(key, 0.0) + (run.end_us - run.start_us) / MICROS_PER_MS
    return {
        "span_ms": (end - start) / MICROS_PER_MS,
        "compute_ms": compute_us / MICROS_PER_MS,
        "exchange_only_ms": (covered - compute_us) / MICROS_PER_MS,
        "idle_ms": (end - start - covered) / MICROS_PER_MS,
        "gradients_done_ms": (max(backward_ends) - start) / MICROS_PER_MS if backward_ends else None,
        "op_ms_by_scope": _top_scopes(by_scope),
    }


def _top_scopes(by_scope: Dict[str, float]) -> Dict[str, float]:
    ranked = sorted(by_scope.items(), key=lambda item: -item[1])
    top = dict(ranked[:TOP_SCOPES])
    rest = sum(ms for _, ms in ranked[TOP_SCOPES:])
    if rest:
        top[OTHER_SCOPES] = top.get(OTHER_SCOPES, 0.0) + rest
    return top


def median_breakdown(steps: Sequence[Dict]) -> Dict:
    """The median of each measure over traced steps (`op_ms_by_scope`: per scope)."""
    if not steps:
        raise ValueError("no traced steps")
    result = {}
    for key in ("span_ms", "compute_ms", "exchange_only_ms", "idle_ms", "gradients_done_ms"):
        values = [step[key] for step in steps if step.get(key) is not None]
        result[key] = statistics.median(values) if values else None
    scopes = {scope for step in steps for scope in step["op_ms_by_scope"]}
    by_scope = {scope: statistics.median([step["op_ms_by_scope"].get(scope, 0.0) for step in steps])
                for scope in scopes}
    result["op_ms_by_scope"] = _top_scopes(by_scope)
    paths = [step[CRITICAL_PATH] for step in steps if step.get(CRITICAL_PATH)]
    if paths:
        result[CRITICAL_PATH] = {key: statistics.median([path[key] for path in paths])
                                 for key in CRITICAL_PATH_MEASURES}
    return result


def chrome_trace(runs: Sequence[OpRun]) -> Dict:
    """The op runs as a Chrome trace (`traceEvents`): one process row per device."""
    devices = sorted({run.device for run in runs})
    pids = {device: index for index, device in enumerate(devices)}
    events = [{"name": "process_name", "ph": "M", "pid": pids[device], "args": {"name": device}}
              for device in devices]
    events += [{"name": run.op, "cat": "exchange" if run.is_exchange else "compute", "ph": "X",
                "pid": pids[run.device], "tid": run.thread, "ts": run.start_us,
                "dur": run.end_us - run.start_us, "args": {"name": run.name}} for run in runs]
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def read_summary(path: str) -> Dict:
    """A `<task>.summary.json` written by `StepTraceHook`."""
    with open(path) as f:
        return json.load(f)


class StepTraceHook(tf.estimator.SessionRunHook):
    """Traces `num_steps` steps of this process and writes their traces and breakdown.

    Args:
      output_dir: where the files go (created).
      task: this process's name in its job (file names).
      num_steps: steps to trace.
      own_job: this process's job in a cluster; None when it has no remote devices.
      warmup_steps: steps of this process before the first traced one.
      every_n_steps: a traced step every this many steps.
    """

    def __init__(self, output_dir: str, task: str, num_steps: int, own_job: Optional[str] = None,
                 warmup_steps: int = DEFAULT_WARMUP_STEPS, every_n_steps: int = DEFAULT_EVERY_N_STEPS):
        if num_steps < 1:
            raise ValueError("num_steps must be >= 1, got %r" % num_steps)
        if every_n_steps < 1:
            raise ValueError("every_n_steps must be >= 1, got %r" % every_n_steps)
        self._output_dir = output_dir
        self._task = task
        self._num_steps = num_steps
        self._own_job = own_job
        self._warmup_steps = warmup_steps
        self._every_n_steps = every_n_steps
        self._steps = 0
        self._tracing = False
        self.breakdowns: List[Dict] = []

    def _wants_trace(self) -> bool:
        past = self._steps - self._warmup_steps
        return (len(self.breakdowns) < self._num_steps and past >= 0
                and past % self._every_n_steps == 0)

    def before_run(self, run_context):
        del run_context
        self._tracing = self._wants_trace()
        if not self._tracing:
            return None
        options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE,
                                          output_partition_graphs=True)
        return tf.estimator.SessionRunArgs(fetches=None, options=options)

    def after_run(self, run_context, run_values):
        del run_context
        step = self._steps
        self._steps += 1
        metadata = run_values.run_metadata
        if not self._tracing or metadata is None or not metadata.step_stats.dev_stats:
            return
        runs = op_runs(metadata.step_stats)
        os.makedirs(self._output_dir, exist_ok=True)
        with open(os.path.join(self._output_dir, "%s-step%d%s" % (self._task, step, TRACE_SUFFIX)), "w") as f:
            json.dump(chrome_trace(runs), f)
        entry = breakdown(runs, self._own_job)
        entry["step"] = step
        if metadata.partition_graphs:
            entry[CRITICAL_PATH] = critical_path.of_step(metadata, local_devices(runs, self._own_job)).summary()
        self.breakdowns.append(entry)

    def end(self, session):
        del session
        if not self.breakdowns:
            logging.warning("step trace: no step of %s was traced (it ran %d steps; tracing starts after %d)",
                            self._task, self._steps, self._warmup_steps)
            return
        path = os.path.join(self._output_dir, self._task + SUMMARY_SUFFIX)
        with open(path, "w") as f:
            json.dump({"task": self._task, "steps": self.breakdowns,
                       "median": median_breakdown(self.breakdowns)}, f, indent=1)
        logging.info("step trace of %s: %d step(s) in %s", self._task, len(self.breakdowns), self._output_dir)
