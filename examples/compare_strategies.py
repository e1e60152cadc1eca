"""Compare the strategies on your own data: examples/sec and AUC side by side.

    python examples/compare_strategies.py data/criteo      # every strategy this machine runs
    python examples/compare_strategies.py data/criteo --strategies single,horovod --steps 500
    python examples/compare_strategies.py data/criteo -- --model dcn --embedding_size 16

(the flags after `--` are `deepfm.train`'s.) It uses the package's command
lines only, as you would from a shell: `python -m deepfm.train` for the
strategies of one process, `python -m deepfm.launch` for those of several,
and the files they write (`--progress_file`, `--metrics_file`).

The data is a dataset root (`train/`, `validation/`, `metadata.json`, as
`dataprep.criteo` or `dataprep.synthetic` write it). Every strategy that can
run on this machine trains DeepFM (the `deepfm.train` defaults and the
dataset's sizes, changed by the flags after `--`) for `--warmup_steps` +
`--steps` steps of each training process, all at the same global batch
(per-replica batch = global batch / replicas), each in a fresh process
tree. Two replicas each: `tower` and `mirrored` on 2 CPU devices, `ps` with
1 parameter server and 2 workers, `horovod` and `hybrid` with 2 ranks (these
two only where Horovod is installed).

examples/sec is the whole job's throughput once every training process is
past its warm-up: the window opens when the last process has done
`--warmup_steps` steps and closes when the first one logs its last
progress line; the examples all processes trained in it (their steps,
interpolated at its ends, times their batch) over its length. AUC is on the
validation files after training. One run each by default: on a machine that
does other work, use `--runs 3` (the median, then the range) before trusting
a small difference. `ps` needs steps enough for its two workers, which start
seconds apart, to train at the same time: a few hundred.
(`benchmarks/strategy_speed/` measures the same way, with more: CPU,
memory, the input and compute ceilings.)
"""

import argparse
import dataclasses
import glob
import importlib.util
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional, Sequence, Tuple

REPLICAS = 2
GLOBAL_BATCH = 1024
# Progress lines (one per interval) every this many steps: the window needs two after warm-up.
LOG_EVERY_STEPS = 10
# A checkpoint interval no run reaches: only the final checkpoint is saved.
NO_CHECKPOINT_STEPS = 10 ** 9
RUN_TIMEOUT_S = 900
STOP_GRACE_S = 30
METADATA_FILE = "metadata.json"
HOROVOD_PACKAGE = "horovod"
TOWERS = ("--num_devices", str(REPLICAS), "--device_type", "cpu")
# Horovod's ranks talk through Gloo (`auto` would pick MPI where mpirun exists).
RANKS = ("--np", str(REPLICAS), "--horovod_controller", "gloo")


@dataclasses.dataclass(frozen=True)
class Strategy:
    """One strategy as this example runs it.

    Attributes:
      name: `--strategy`.
      note: what it is, for the table.
      replicas: replicas sharing the global batch.
      processes: training processes (each trains global batch / processes examples a step).
      train_flags: its own `deepfm.train` flags.
      launch_flags: `deepfm.launch` flags; empty: one `deepfm.train` process.
      needs_horovod: whether it runs Horovod ranks.
    """

    name: str
    note: str
    replicas: int = 1
    processes: int = 1
    train_flags: Tuple[str, ...] = ()
    launch_flags: Tuple[str, ...] = ()
    needs_horovod: bool = False


STRATEGIES = (
    Strategy("single", "one device"),
    Strategy("tower", "%d CPU towers, one process" % REPLICAS, replicas=REPLICAS, train_flags=TOWERS),
    Strategy("mirrored", "MirroredStrategy, %d CPU replicas" % REPLICAS, replicas=REPLICAS, train_flags=TOWERS),
    Strategy("ps", "1 ps + %d async workers (gRPC)" % REPLICAS, replicas=REPLICAS, processes=REPLICAS,
             launch_flags=("--num_ps", "1", "--num_workers", str(REPLICAS))),
    Strategy("horovod", "%d ranks, Gloo" % REPLICAS, replicas=REPLICAS, processes=REPLICAS, launch_flags=RANKS,
             needs_horovod=True),
    Strategy("hybrid", "%d ranks, Gloo, tables sharded across them" % REPLICAS, replicas=REPLICAS,
             processes=REPLICAS, launch_flags=RANKS, needs_horovod=True),
)


@dataclasses.dataclass
class Run:
    """One run of a strategy: the job's examples/sec in its window, and the validation AUC after it."""

    examples_per_sec: float
    auc: Optional[float]


def parse_args(argv=None) -> argparse.Namespace:
    """The command line: this script's flags, then `--` and `deepfm.train` flags for every run (`train_flags`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("data", help="a dataset root: train/, validation/ and metadata.json")
    parser.add_argument("--strategies", default="", help="comma-separated names (default: every one that runs here)")
    parser.add_argument("--steps", type=int, default=300, help="timed steps of every training process")
    parser.add_argument("--warmup_steps", type=int, default=50, help="steps of every training process before timing")
    parser.add_argument("--global_batch", type=int, default=GLOBAL_BATCH)
    parser.add_argument("--optimizer", default="lazy_adam", help="deepfm.train's --optimizer")
    parser.add_argument("--runs", type=int, default=1, help="runs of every strategy, interleaved")
    parser.add_argument("--timeout_s", type=float, default=RUN_TIMEOUT_S, help="limit of one run")
    args = parser.parse_args(argv[:split])
    args.train_flags = tuple(argv[split + 1:])
    least_steps = 2 * LOG_EVERY_STEPS  # the throughput needs two progress lines after warm-up
    if args.steps < least_steps:
        parser.error("--steps must be >= %d, got %d" % (least_steps, args.steps))
    if not os.path.isfile(os.path.join(args.data, METADATA_FILE)):
        parser.error("%s is not a dataset root (no %s): write one with python -m dataprep.criteo "
                     "or python -m dataprep.synthetic" % (args.data, METADATA_FILE))
    return args


def choose(names_flag: str) -> List[Strategy]:
    """The strategies to run: those asked for (all by default) that can run here; says which are left out."""
    known = {strategy.name: strategy for strategy in STRATEGIES}
    names = [name for name in names_flag.split(",") if name] or list(known)
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise SystemExit("compare_strategies: --strategies: unknown %s; choose from %s"
                         % (", ".join(unknown), ", ".join(known)))
    chosen = []
    for name in names:
        if known[name].needs_horovod and importlib.util.find_spec(HOROVOD_PACKAGE) is None:
            print("%s is left out: Horovod is not installed (pip install 'deepfm-strategies[horovod]')" % name,
                  file=sys.stderr)
        else:
            chosen.append(known[name])
    if not chosen:
        raise SystemExit("compare_strategies: none of %s can run on this machine" % ", ".join(names))
    return chosen


def command(strategy: Strategy, args: argparse.Namespace, work: str) -> List[str]:
    """The command line of one run of `strategy`, with its files under `work`."""
    train = [
        "--train_data", os.path.abspath(args.data), "--model_dir", os.path.join(work, "model"),
        "--metrics_file", os.path.join(work, "metrics.json"),
        "--progress_file", os.path.join(work, "progress", "{task}.jsonl"),
        "--batch_size", str(args.global_batch // strategy.replicas),
        "--max_steps", str(args.warmup_steps + args.steps), "--log_every_n_steps", str(LOG_EVERY_STEPS),
        "--save_checkpoints_steps", str(NO_CHECKPOINT_STEPS), "--optimizer", args.optimizer,
    ] + list(strategy.train_flags) + list(args.train_flags)
    if not strategy.launch_flags:
        return [sys.executable, "-m", "deepfm.train", "--strategy", strategy.name] + train
    return ([sys.executable, "-m", "deepfm.launch", "--strategy", strategy.name,
             "--log_dir", os.path.join(work, "tasks")] + list(strategy.launch_flags) + ["--"] + train)


def read_progress(path: str) -> List[Tuple[float, int]]:
    """(wall time, this process's step) of each line of a `--progress_file`."""
    with open(path) as f:
        records = [json.loads(line) for line in f if line.strip()]
    return [(float(record["time"]), int(record["step"])) for record in records]


def interpolate(points: Sequence[Tuple[float, int]], when: float) -> float:
    """The step of `points` at time `when`, linear between the two around it."""
    for (t0, s0), (t1, s1) in zip(points, points[1:]):
        if t0 <= when <= t1:
            return s0 + (s1 - s0) * (when - t0) / (t1 - t0) if t1 > t0 else s1
    raise ValueError("time %.2f is outside the progress lines" % when)


def job_rate(progress: Sequence[Sequence[Tuple[float, int]]], batch: int, warmup_steps: int) -> float:
    """The job's examples/sec in the window where every training process is past warm-up (see the docstring).

    Raises:
      ValueError: the processes never trained past warm-up at the same time, with two progress lines each.
    """
    timed = [[point for point in points if point[1] >= warmup_steps] for points in progress]
    if any(len(points) < 2 for points in timed):
        raise ValueError("a training process logged fewer than 2 progress lines after warm-up: raise --steps")
    start, end = max(points[0][0] for points in timed), min(points[-1][0] for points in timed)
    if end <= start:
        raise ValueError("the training processes never trained past warm-up at the same time: raise --steps")
    examples = sum(batch * (interpolate(points, end) - interpolate(points, start)) for points in progress)
    return examples / (end - start)


def run_once(strategy: Strategy, args: argparse.Namespace) -> Run:
    """Runs `strategy` once in a fresh process tree and measures it.

    Raises:
      RuntimeError: the job failed (the message holds the end of its output).
      TimeoutError: it ran past `--timeout_s` (it was stopped, every process of it).
      ValueError: its progress allows no measurement window.
    """
    with tempfile.TemporaryDirectory(prefix="compare-strategies-") as work:
        log_path = os.path.join(work, "output.log")
        with open(log_path, "w") as log:
            job = subprocess.Popen(command(strategy, args, work), stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
            try:
                job.wait(timeout=args.timeout_s)
            except subprocess.TimeoutExpired:
                stop(job)
                raise TimeoutError("%s ran past %.0f s and was stopped" % (strategy.name, args.timeout_s)) from None
        if job.returncode != 0:
            with open(log_path) as f:
                raise RuntimeError("%s failed with exit code %d:\n%s" % (strategy.name, job.returncode,
                                                                         f.read()[-2000:]))
        paths = sorted(glob.glob(os.path.join(work, "progress", "*.jsonl")))
        if len(paths) != strategy.processes:
            raise ValueError("%s: %d progress file(s), expected one per training process (%d)"
                             % (strategy.name, len(paths), strategy.processes))
        batch = args.global_batch // strategy.replicas * strategy.replicas // strategy.processes
        rate = job_rate([read_progress(path) for path in paths], batch, args.warmup_steps)
        with open(os.path.join(work, "metrics.json")) as f:
            return Run(examples_per_sec=rate, auc=json.load(f).get("auc"))


def stop(job: subprocess.Popen) -> None:
    """Stops a job and every process it started: SIGTERM (a launcher stops its tasks), then SIGKILL."""
    for signum in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(job.pid, signum)
        except ProcessLookupError:
            return
        try:
            job.wait(timeout=STOP_GRACE_S)
            return
        except subprocess.TimeoutExpired:
            continue


def summary(values: Sequence[float], spec: str) -> str:
    """One run's value, or the median (min-max) of several."""
    if len(values) == 1:
        return format(values[0], spec)
    return "%s (%s-%s)" % (format(statistics.median(values), spec), format(min(values), spec),
                           format(max(values), spec))


def table(strategies: Sequence[Strategy], runs: Dict[str, List[Run]], failures: Dict[str, int], examples: int) -> str:
    """The strategies side by side, as markdown."""
    single = statistics.median([r.examples_per_sec for r in runs["single"]]) if runs.get("single") else None
    lines = ["| strategy | what | examples/sec | x single | AUC after %s examples |" % format(examples, ","),
             "|---|---|---|---|---|"]
    for strategy in strategies:
        done = runs[strategy.name]
        if not done:
            lines.append("| %s | %s | failed: see above | | |" % (strategy.name, strategy.note))
            continue
        rates = [r.examples_per_sec for r in done]
        aucs = [r.auc for r in done if r.auc is not None]
        failed = " (%d failed run(s))" % failures[strategy.name] if failures[strategy.name] else ""
        lines.append("| %s | %s | %s%s | %s | %s |" % (
            strategy.name, strategy.note, summary(rates, ",.0f"), failed,
            "%.2f" % (statistics.median(rates) / single) if single else "n/a",
            summary(aucs, ".4f") if aucs else "n/a"))
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    strategies = choose(args.strategies)
    runs: Dict[str, List[Run]] = {s.name: [] for s in strategies}
    failures = {s.name: 0 for s in strategies}
    # Interleaved, round by round; a failed run is reported and the others go on.
    for round_index in range(args.runs):
        for strategy in strategies:
            try:
                run = run_once(strategy, args)
            except (RuntimeError, TimeoutError, ValueError, OSError) as e:
                failures[strategy.name] += 1
                print("run %d %s FAILED: %s" % (round_index, strategy.name, e), file=sys.stderr)
                continue
            runs[strategy.name].append(run)
            print("run %d %-9s %8.0f examples/sec  AUC %s" % (
                round_index, strategy.name, run.examples_per_sec, "n/a" if run.auc is None else "%.4f" % run.auc),
                file=sys.stderr)
    print(table(strategies, runs, failures, (args.warmup_steps + args.steps) * args.global_batch))
    return 1 if any(failures.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
