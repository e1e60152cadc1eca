"""Tables larger than a host: each strategy's memory, start-up and speed per table size.

    python -m benchmarks.large_tables [--feature_sizes 117581,2000000,20000000]
        [--strategies single,hybrid,ps] [--processes 2,4] [--rows 400000] [--max_steps 300]
        [--host_memory 6g] [--work_dir runs/large_tables] [--results_dir DIR] [--rounds 1]

For every table size (`--feature_sizes`, ids) it generates a synthetic
dataset once (`python -m dataprep.synthetic --rows R --feature_size F
--output_dir <work_dir>/data/...`), then runs every variant on it, one at a
time, each a fresh process tree started as a user starts it:

* `single`: `python -m deepfm.train --strategy single`;
* `hybrid xN`: `python -m deepfm.launch --strategy hybrid --np N`;
* `ps xN`: `python -m deepfm.launch --strategy ps --num_ps N --num_workers N`,

N from `--processes`; `--host_memory` goes to `deepfm.launch` (the launched
tasks share one memory cgroup with that limit; root needed), `single` runs
without one. Every run trains DeepFM at the defaults (embedding 32, layers
128-64-32, `lazy_adam`) with `--max_steps`, `--batch_size` per process,
`--seed` and `--export_dir`, one progress record per step
(`--log_every_n_steps 1`, a `--progress_file` per training process) and only
the final checkpoint. A second run, the restart, resumes the same model
directory to `max_steps + restart_steps` without evaluation or export. Then
the model and export directories are deleted (a 20M-id checkpoint is 8 GB).

Per row (variant, table size):

* state: bytes of the weights and optimizer slots (`strategies.memory_estimate`,
  measured from the model's graph in a child process), and the largest
  share of it one process of the variant holds (the strategy's own
  `Strategy.memory` at N processes);
* peak resident memory of every process of the tree (`VmHWM` sampled every
  `SAMPLE_SECONDS`, `common.ProcessTreeSampler`), named by command line and
  task; the table shows the largest and its ratio to the largest share;
* time to first step: from the command's start until every training
  process has finished its first step (its first progress record), for the
  start and the restart;
* examples/sec: the job's throughput after `--warmup_steps`, summed over
  its training processes (`strategy_speed.measure.job_window`);
* wall seconds of each run, and its end: from the last step of the chief
  until its `--metrics_file` is written (start: final checkpoint, evaluation
  and export; restart: the final checkpoint alone, also shown per GB of
  state).
* evaluation seconds (the start's) and restore seconds (the restart's,
  also per GB of the largest share): the slowest process's, from the lines
  its log holds at `--verbosity 0` (`large_tables_report.slowest`).

Each row (a variant at a table size) is a variant of `benchmarks.harness`,
run `--rounds` times (default once: a 20M-id row takes minutes), the
smallest table first. Results go to `<results_dir>/<name>.{md,json}` with
the machine and the command. A failed run (killed for memory, refused by
the memory check) is a row that says why; the benchmark then exits with 1.
"""

import dataclasses
import glob
import json
import os
import shlex
import shutil
import sys
import time
from typing import Dict, List, Optional, Sequence, Tuple

from benchmarks import common, harness
from benchmarks import large_tables_report as report
from benchmarks.strategy_speed.measure import job_window, read_progress
from cli import config_flags
from jobs import source
from jobs.local import processes as processes_lib

NAME = "large_tables"
DEFAULT_FEATURE_SIZES = (common.FEATURE_SIZE, 2_000_000, 20_000_000)
DEFAULT_STRATEGIES = ("single", "hybrid", "ps")
DEFAULT_PROCESSES = (2, 4)
DEFAULT_ROWS = 400_000
DEFAULT_MAX_STEPS = 300
DEFAULT_RESTART_STEPS = 10
DEFAULT_WARMUP_STEPS = 50
DEFAULT_BATCH = 1024
DEFAULT_SEED = 1
DEFAULT_WORK_DIR = os.path.join("runs", NAME)
RUN_TIMEOUT_S = 3600.0
SAMPLE_SECONDS = 0.15
# A checkpoint interval no run reaches: only the final checkpoint is written.
NO_CHECKPOINT_STEPS = 10 ** 9
# Strategies run through `deepfm.launch`, with their flags for N processes.
LAUNCHED = {"hybrid": lambda n: ["--np", str(n)],
            "ps": lambda n: ["--num_ps", str(n), "--num_workers", str(n)]}
PROGRESS_DIR = "progress"
TASK_PROGRESS_FILE = "{task}.jsonl"
METRICS_FILE = "metrics.json"



def variants_of(strategies: Sequence[str], counts: Sequence[int]) -> List[report.Variant]:
    """`single` once, each launched strategy at each count of processes, in the order given.

    Raises:
      ValueError: an unknown strategy or a count below 1; the message names it.
    """
    unknown = [s for s in strategies if s != report.SINGLE and s not in LAUNCHED]
    if unknown:
        raise ValueError("--strategies: unknown %s; known: %s" % (
            ", ".join(map(repr, unknown)), ", ".join((report.SINGLE,) + tuple(LAUNCHED))))
    if not strategies or any(count < 1 for count in counts) or not counts:
        raise ValueError("--strategies and --processes need at least one entry each, counts >= 1; got %r and %r"
                         % (list(strategies), list(counts)))
    return [report.Variant(s) if s == report.SINGLE else report.Variant(s, n)
            for s in strategies for n in ((1,) if s == report.SINGLE else counts)]


def int_list(text: str, flag: str) -> Tuple[int, ...]:
    """`"117581,2000000"` -> (117581, 2000000); "_" separators allowed.

    Raises:
      ValueError: an entry that is not an integer; the message names the flag and it.
    """
    try:
        return tuple(int(part.replace("_", "")) for part in text.split(",") if part.strip())
    except ValueError as e:
        raise ValueError("--%s: expected comma-separated integers, got %r" % (flag, text)) from e


@dataclasses.dataclass(frozen=True)
class BenchmarkConfig(harness.HarnessConfig):
    """What one benchmark run measures (its flags).

    `sizes()` and `table_variants()` are `feature_sizes` and the variants
    of `strategies` x `processes`, parsed; `variants` (the harness's) names
    rows to keep, e.g. `single@117581` (empty: all).
    """

    rounds: int = config_flags.field(1, "Rounds; each runs every row once (a 20M-id row takes minutes).")
    feature_sizes: str = config_flags.field(",".join(map(str, DEFAULT_FEATURE_SIZES)),
                                            "Table sizes in ids, comma-separated.")
    strategies: str = config_flags.field(",".join(DEFAULT_STRATEGIES), "Of single, hybrid, ps, comma-separated.")
    processes: str = config_flags.field(",".join(map(str, DEFAULT_PROCESSES)),
                                        "hybrid ranks; ps parameter servers and as many workers.")
    rows: int = config_flags.field(DEFAULT_ROWS, "Rows of each generated dataset.")
    max_steps: int = config_flags.field(DEFAULT_MAX_STEPS, "Steps of the start run (a global step).")
    restart_steps: int = config_flags.field(DEFAULT_RESTART_STEPS, "Steps the restart trains beyond --max_steps.")
    warmup_steps: int = config_flags.field(DEFAULT_WARMUP_STEPS,
                                           "Steps of each training process left out of examples/sec.")
    batch_size: int = config_flags.field(DEFAULT_BATCH, "--batch_size of every training process.")
    seed: int = config_flags.field(DEFAULT_SEED, "--seed of every run.")
    host_memory: str = config_flags.field("", "deepfm.launch --host_memory (e.g. 12g; root needed).")
    work_dir: str = config_flags.field(DEFAULT_WORK_DIR, "Datasets and runs.")
    timeout_s: float = config_flags.field(RUN_TIMEOUT_S, "The longest one run may take.")
    child_state: str = config_flags.field("", "Internal: measure the state of these table sizes (JSON), print JSON.")

    def __post_init__(self):
        super().__post_init__()
        sizes = self.sizes()
        if not sizes or min(sizes) < 2:
            raise ValueError("--feature_sizes needs sizes of at least 2 ids, got %r" % self.feature_sizes)
        self.table_variants()
        for flag, value, least in (("rows", self.rows, 1), ("max_steps", self.max_steps, 2),
                                   ("restart_steps", self.restart_steps, 1), ("warmup_steps", self.warmup_steps, 0),
                                   ("batch_size", self.batch_size, 1), ("timeout_s", self.timeout_s, 1)):
            if value < least:
                raise ValueError("--%s must be >= %d, got %r" % (flag, least, value))
        if self.warmup_steps + 2 > self.max_steps:
            raise ValueError("--warmup_steps %d leaves fewer than 2 timed steps of --max_steps %d: lower it"
                             % (self.warmup_steps, self.max_steps))

    def sizes(self) -> Tuple[int, ...]:
        """`--feature_sizes`, parsed (ValueError names a bad entry)."""
        return int_list(self.feature_sizes, "feature_sizes")

    def table_variants(self) -> Tuple[report.Variant, ...]:
        """The variants of `--strategies` at each of `--processes` (ValueError names a bad entry)."""
        strategies = [s.strip() for s in self.strategies.split(",") if s.strip()]
        return tuple(variants_of(strategies, int_list(self.processes, "processes")))

    def data_dir(self, feature_size: int) -> str:
        return os.path.join(os.path.abspath(self.work_dir), "data", "%dids_%drows" % (feature_size, self.rows))

    def run_dir(self, variant: report.Variant, feature_size: int) -> str:
        return os.path.join(os.path.abspath(self.work_dir), "runs",
                            "%s-%d" % (variant.name.replace(" ", ""), feature_size))


def parse_args(argv: Sequence[str]) -> BenchmarkConfig:
    """The config of a command line's flags (`argv` without the program).

    Raises:
      absl.app.UsageError: a bad value, named with its flag.
    """
    return harness.parse(BenchmarkConfig, ["benchmarks.large_tables"] + list(argv))


# --- state -------------------------------------------------------------------------------------------------


def state_bytes(feature_size: int, variants: Sequence[report.Variant], batch_size: int) -> Dict:
    """`{"state_bytes": S, "shares": {variant name: bytes}}` of DeepFM at the defaults with `feature_size` ids.

    Builds the model's graph once (nothing is allocated: cheap at 20M ids)
    and asks each strategy for the state each of its processes holds at the
    variant's count; a share is the largest of them. Imports TensorFlow: run
    it in a child process (`--child_state`).
    """
    import strategies
    from deepfm import models
    from deepfm.config import ModelConfig
    from deepfm.models import ctr
    from input_pipeline import schema
    from strategies import memory_estimate

    model = ModelConfig(feature_size=feature_size, field_size=schema.FIELD_SIZE)
    state = memory_estimate.model_state(models.get(model.model), ctr.model_params(model), model.field_size)
    shares = {}
    for variant in variants:
        strategy = strategies.get(strategies.make_config(name=variant.strategy))
        estimates = strategy.memory(state, batch_size * model.field_size).estimates(variant.processes)
        shares[variant.name] = max(memory.state for memory in estimates.values())
    return {"state_bytes": state.variable_bytes + state.slot_bytes, "shares": shares}


def _state_child(spec: str) -> dict:
    """`--child_state` (JSON: feature_sizes, variants, batch_size): `state_bytes` of each size, keyed by size."""
    request = json.loads(spec)
    variants = [report.Variant(strategy, count) for strategy, count in request["variants"]]
    return {str(size): state_bytes(size, variants, request["batch_size"]) for size in request["feature_sizes"]}


def measure_states(config: BenchmarkConfig) -> Dict[int, Dict]:
    """`state_bytes` of every table size, from one child process."""
    spec = json.dumps({"feature_sizes": list(config.sizes()), "batch_size": config.batch_size,
                       "variants": [[v.strategy, v.processes] for v in config.table_variants()]})
    out = common.run_json_subprocess(["-m", "benchmarks.large_tables", "--child_state", spec], timeout=1200,
                                     env={"PYTHONPATH": _python_path()})
    return {int(size): value for size, value in out.items()}


# --- runs --------------------------------------------------------------------------------------------------


def _python_path() -> str:
    return os.pathsep.join(p for p in (source.project_root(), os.environ.get("PYTHONPATH", "")) if p)


def _child_env() -> Dict[str, str]:
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=_python_path())


def ensure_data(config: BenchmarkConfig, feature_size: int) -> str:
    """The dataset of `feature_size` ids, generated by `python -m dataprep.synthetic` unless already there.

    Raises:
      RuntimeError: the generator failed; the message holds its output's end.
    """
    data_dir = config.data_dir(feature_size)
    if os.path.isfile(os.path.join(data_dir, "metadata.json")):
        return data_dir
    argv = [sys.executable, "-m", "dataprep.synthetic", "--rows", str(config.rows), "--feature_size",
            str(feature_size), "--output_dir", data_dir, "--overwrite"]
    log_dir = os.path.join(os.path.abspath(config.work_dir), "logs")
    with processes_lib.ProcessGroup(log_dir) as group:
        group.start("synthetic-%d" % feature_size, argv, env=_child_env())
        group.wait(timeout=config.timeout_s)
    return data_dir


def command(variant: report.Variant, config: BenchmarkConfig, data_dir: str, run_dir: str, phase: str) -> List[str]:
    """The command line of the start or the restart of `variant`, its files under `run_dir`."""
    restart = phase == report.RESTART
    train = [
        "--train_data", data_dir, "--model_dir", os.path.join(run_dir, "model"),
        "--max_steps", str(config.max_steps + (config.restart_steps if restart else 0)),
        "--batch_size", str(config.batch_size), "--seed", str(config.seed),
        "--metrics_file", os.path.join(run_dir, phase, METRICS_FILE),
        "--progress_file", os.path.join(run_dir, phase, PROGRESS_DIR, TASK_PROGRESS_FILE),
        "--log_every_n_steps", "1", "--save_checkpoints_steps", str(NO_CHECKPOINT_STEPS),
        # INFO lines in the logs: each restore's and evaluation's seconds (`large_tables_report.slowest`).
        "--verbosity", "0",
    ] + (["--val_data="] if restart else ["--export_dir", os.path.join(run_dir, "export")])
    if variant.strategy == report.SINGLE:
        return [sys.executable, "-m", "deepfm.train", "--strategy", report.SINGLE] + train
    launch = [sys.executable, "-m", "deepfm.launch", "--strategy", variant.strategy,
              "--log_dir", os.path.join(run_dir, phase, "tasks"), "--timeout_s", str(config.timeout_s)]
    if config.host_memory:
        launch += ["--host_memory", config.host_memory]
    return launch + LAUNCHED[variant.strategy](variant.processes) + ["--"] + train


def progress_of(phase_dir: str, expected: int) -> Dict[str, List[Tuple[float, int]]]:
    """The (time, step) points of each training process's progress file, keyed by its task.

    Raises:
      RuntimeError: not `expected` files, or one without a record.
    """
    paths = sorted(glob.glob(os.path.join(phase_dir, PROGRESS_DIR, "*.jsonl")))
    progress = {os.path.basename(path)[:-len(".jsonl")]: read_progress(path) for path in paths}
    empty = [task for task, points in progress.items() if not points]
    if len(progress) != expected or empty:
        raise RuntimeError("found the progress of %d training process(es) in %s (%s without a step), expected %d"
                           % (len(progress), os.path.join(phase_dir, PROGRESS_DIR), ", ".join(empty) or "none",
                              expected))
    return progress


def measure_from(started: float, ended: float, progress: Dict[str, List[Tuple[float, int]]],
                 processes: List[Dict], metrics: Dict, metrics_written: Optional[float], batch_size: int,
                 warmup_steps: int) -> report.RunMeasure:
    """A `report.RunMeasure` from what a finished run left (no process is started here).

    Args:
      started: wall time of the command's start.
      ended: wall time when it exited.
      progress: per training process, its (time, step) points.
      processes: what the sampler saw of each process.
      metrics: the chief's metrics file.
      metrics_written: when it was written (its modification time).
      batch_size: examples per step of each training process.
      warmup_steps: steps of each process left out of examples/sec.
    """
    first = {task: points[0][0] - started for task, points in progress.items()}
    measured = report.RunMeasure(wall_s=ended - started, time_to_first_step_s=max(first.values()), first_step_s=first,
                          processes=processes, hook_examples_per_sec=metrics.get("examples_per_sec"))
    try:
        _, _, measured.examples_per_sec = job_window(list(progress.values()), [batch_size] * len(progress),
                                                     warmup_steps)
    except ValueError as e:
        measured.window_error = str(e)
    if metrics_written is not None:
        chief_end = max(points[-1][0] for points in progress.values())
        measured.end_s = metrics_written - chief_end
    return measured


def run_phase(variant: report.Variant, config: BenchmarkConfig, data_dir: str, run_dir: str,
              phase: str) -> report.RunMeasure:
    """Runs the start or the restart of `variant` in a fresh process tree and measures it.

    Raises:
      jobs.local.processes.TaskFailedError: the run failed (the message
        holds the end of its log, and whether the kernel killed it for memory).
      TimeoutError: it ran longer than `config.timeout_s`.
      RuntimeError: it left no progress of a training process.
    """
    phase_dir = os.path.join(run_dir, phase)
    shutil.rmtree(phase_dir, ignore_errors=True)
    argv = command(variant, config, data_dir, run_dir, phase)
    with processes_lib.ProcessGroup(phase_dir) as group:
        started = time.time()
        task = group.start("job", argv, env=_child_env())
        with common.ProcessTreeSampler(task.pid, SAMPLE_SECONDS) as sampler:
            group.wait(timeout=config.timeout_s)
        ended = time.time()
    metrics_path = os.path.join(phase_dir, METRICS_FILE)
    metrics, written = {}, None
    if os.path.isfile(metrics_path):
        with open(metrics_path) as f:
            metrics = json.load(f)
        written = os.path.getmtime(metrics_path)
    # A process that exited before a sample could read its memory (a shell between two commands) is left out.
    processes = [{"label": p.label, "pid": p.pid, "peak_rss_bytes": p.peak_rss_bytes} for p in sampler.processes
                 if p.peak_rss_bytes > 0]
    measured = measure_from(started, ended, progress_of(phase_dir, variant.processes), processes, metrics,
                            written, config.batch_size, config.warmup_steps)
    measured.restore_s, measured.evaluation_s = report.slowest(logs_of(phase_dir))
    return measured


def logs_of(phase_dir: str) -> List[str]:
    """The text of every process's log of a run (`job.log`, and each launched task's under `tasks/`)."""
    texts = []
    for path in sorted(glob.glob(os.path.join(phase_dir, "**", "*.log"), recursive=True)):
        with open(path, errors="replace") as f:
            texts.append(f.read())
    return texts


def measure_row(variant: report.Variant, feature_size: int, state: Dict, config: BenchmarkConfig,
                data_dir: str) -> report.Row:
    """The start and the restart of `variant` on `data_dir`; its model and export are deleted afterwards."""
    row = report.Row(variant, feature_size, state["state_bytes"], state["shares"][variant.name])
    run_dir = config.run_dir(variant, feature_size)
    shutil.rmtree(run_dir, ignore_errors=True)
    phase = report.START
    try:
        for phase in (report.START, report.RESTART):
            measured = run_phase(variant, config, data_dir, run_dir, phase)
            setattr(row, phase, measured)
            print("%-10s %11s ids %-7s first step %6.1f s  peak RSS %6.2f GB (%s)  wall %6.1f s" % (
                variant.name, format(feature_size, ","), phase, measured.time_to_first_step_s,
                measured.largest["peak_rss_bytes"] / report.GB, measured.largest["label"], measured.wall_s),
                file=sys.stderr)
    except (RuntimeError, TimeoutError, ValueError, OSError) as e:
        row.error = "%s: %s" % (phase, str(e)[-2000:])
        print("%-10s %11s ids FAILED: %s" % (variant.name, format(feature_size, ","), row.error), file=sys.stderr)
    finally:
        for name in ("model", "export"):
            shutil.rmtree(os.path.join(run_dir, name), ignore_errors=True)
    return row


@dataclasses.dataclass
class RowVariant(harness.Variant):
    """A variant at a table size: its start and restart each round, a fresh process tree each.

    `rows` keeps each round's `report.Row` (a failed run is a row that says
    why, not a harness failure: the other rows go on either way).
    """

    variant: report.Variant
    feature_size: int
    state: Dict
    config: BenchmarkConfig
    rows: List[report.Row] = dataclasses.field(default_factory=list)

    @property
    def name(self) -> str:  # type: ignore[override]
        return "%s@%d" % (self.variant.name.replace(" ", ""), self.feature_size)

    def measure(self, round_index: int) -> harness.Measurement:
        row = measure_row(self.variant, self.feature_size, self.state, self.config,
                          ensure_data(self.config, self.feature_size))
        if round_index >= 0:
            self.rows.append(row)
        metrics: Dict[str, float] = {"failed": float(bool(row.error))}
        peak = 0.0
        for phase in (report.START, report.RESTART):
            measured = getattr(row, phase)
            if measured is None:
                continue
            metrics[phase + ".time_to_first_step_s"] = measured.time_to_first_step_s
            metrics[phase + ".wall_s"] = measured.wall_s
            if measured.examples_per_sec is not None:
                metrics[phase + ".examples_per_sec"] = measured.examples_per_sec
            peak = max([peak] + [p["peak_rss_bytes"] / float(1 << 20) for p in measured.processes])
        return harness.Measurement(metrics, peak)


def measure(config: BenchmarkConfig) -> Tuple[harness.Results, List[report.Row]]:
    """Every variant at every table size, smallest first, `config.rounds` times; a failed run is a row."""
    states = measure_states(config)
    rows = [RowVariant(variant, size, states[size], config)
            for size in sorted(config.sizes()) for variant in config.table_variants()]
    results = harness.run(common.select_variants(config.variants, rows), config.rounds, config.warmup_rounds)
    return results, [row for variant in rows for row in variant.rows]


def report_body(config: BenchmarkConfig, rows: Sequence[report.Row], argv: Sequence[str]) -> str:
    """The markdown of the report: the command, the set-up, the table, every process's peak."""
    setup = (
        "Command: `python -m benchmarks.large_tables %s`.\n\n"
        "DeepFM at the defaults (embedding 32, layers 128-64-32, `lazy_adam`) on synthetic datasets of %s rows "
        "(one per table size), batch %d per training process, %d steps, seed %d, with the export; the restart "
        "resumes the model directory to step %d without evaluation or export. Host memory of the launched "
        "jobs: %s (`single`: none). state: weights and optimizer slots of the whole model; largest share: the "
        "most of it one process holds (the strategy's memory estimate); peak RSS: the largest `VmHWM` of any "
        "process of either run (every process below); first step: from the command's start until every "
        "training process has finished one; examples/sec: the job's after %d warm-up steps of each training "
        "process, summed over them; end: from the last step until the chief's metrics file is written; evaluation: "
        "the slowest process's (its `Inference Time`); restore: the slowest process's restore of the checkpoint "
        "(its log's `restored ... in S s` lines), per GB of the largest share."
        % (" ".join(shlex.quote(a) for a in argv), format(config.rows, ","), config.batch_size, config.max_steps,
           config.seed, config.max_steps + config.restart_steps, config.host_memory or "no limit",
           config.warmup_steps))
    sections = [setup, common.markdown_table(report.HEADER, [report.table_row(row) for row in rows]),
                "Peak RSS of every process:\n\n" + report.process_lines(rows)]
    return "\n\n".join(sections)


def raw_results(config: BenchmarkConfig, rows: Sequence[report.Row], argv: Sequence[str]) -> dict:
    """The JSON of the report: the command, the set-up and every run."""
    setup = dataclasses.asdict(config)
    setup["variants"] = [v.name for v in config.table_variants()]
    setup.pop("results_dir")
    setup["work_dir"] = os.path.basename(os.path.abspath(config.work_dir))
    return {
        "command": ["python", "-m", "benchmarks.large_tables"] + list(argv), "setup": setup,
        "rows": report.rows_json(rows),
    }


def benchmark(config: BenchmarkConfig) -> int:
    """Runs the benchmark (or, with `child_state`, the state of its table sizes); returns the exit status."""
    if config.child_state:
        print(json.dumps(_state_child(config.child_state)))
        return 0
    results, rows = measure(config)
    argv = harness.recorded_flags()
    body = report_body(config, rows, argv)
    harness.write(results, config, NAME, "Tables larger than a host: memory, start-up and speed per strategy", body,
                  harness.machine_record(), extra=raw_results(config, rows, argv))
    print(body)
    return 1 if results.failures or any(row.error for row in rows) else 0


if __name__ == "__main__":
    harness.main(BenchmarkConfig, benchmark)
