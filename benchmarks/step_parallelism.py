"""How far one process's step can use more cores: its measured speed-up against what its op graph allows.

    python -m benchmarks.step_parallelism [--cores 1,2] [--threads 1/2,2/1] [--runs 3] [--steps 400]
                                          [--batch_size 1024] [--data_dir data/synthetic_300k]
                                          [--results_dir DIR] [--name NAME]

For each core count n of `--cores`, `single` trains pinned to n vCPUs
(`taskset`, `--intra_op_threads n --inter_op_threads n`), and on each n
but the first again with each intra/inter thread count of `--threads`, in
`--runs` interleaved rounds, each a fresh `python -m deepfm.train` started with a
minimal environment (PATH, HOME, PYTHONPATH) as a user starts it. Each run
traces `TRACE_STEPS` steps early (`--trace_steps`: `deepfm.runtime.step_trace`,
with each step's critical path, `deepfm.runtime.critical_path`) and reports
its rate from its progress file over the steps after `RATE_FROM_STEP`, past
the traced ones. The report, per core count, medians (min-max) over rounds:

* examples/sec, and over one core's in the same round;
* of the traced steps (medians): span, work (the ops' summed time),
  critical path (the longest chain of dependent ops), parallelism (work /
  critical path), and the work over one core's (how much slower the same
  ops ran beside each other);
* the bound n cores could reach were every op as fast as on one core and
  the threads kept busy: one core's work / max(its critical path, its work
  / n) (`CriticalPath.speedup_bound`), beside the measured speed-up.

`<name>.md` and `.json` go to `--results_dir` (default the committed
`benchmarks/results/`), with the machine, the command and `lscpu -e`; the
json's rounds also hold each run's peak resident memory. The rounds run on
`benchmarks.harness`.
"""

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Dict, List, Sequence, Tuple

from benchmarks import common, harness
from benchmarks import topology as topology_lib
from benchmarks.scale_out import config as scale_out_config
from cli import config_flags
from deepfm.runtime import critical_path, hooks, step_trace

NAME = "step_parallelism"
TITLE = "One process on more cores: measured speed-up against its op graph's bound"
# The project's root: the training processes import it.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_CORES = (1, 2)
DEFAULT_RUNS = 3
DEFAULT_STEPS = 400
DEFAULT_BATCH = 1024
TRACE_STEPS = 5
LOG_EVERY_STEPS = 50
# The rate counts the progress intervals that end after this step: past the warm-up and the traced steps
# (`step_trace.DEFAULT_WARMUP_STEPS` + TRACE_STEPS x `step_trace.DEFAULT_EVERY_N_STEPS` = 45).
RATE_FROM_STEP = 100
RUN_TIMEOUT_S = 900
# Seconds between samples of a training process's resident memory.
MEMORY_SAMPLE_S = 0.5
# The figures of a run, as its measurement names them.
RATE = "examples_per_sec"
TRACED = ("span_ms", "work_ms", "critical_path_ms", "parallelism")


@dataclasses.dataclass(frozen=True)
class Layout:
    """One run's vCPUs and TensorFlow threads."""

    vcpus: int
    intra: int
    inter: int

    @property
    def label(self) -> str:
        return "%d vCPU(s), threads %d/%d" % (self.vcpus, self.intra, self.inter)


def plan(cores: Sequence[int], threads: Sequence[Tuple[int, int]]) -> List[Layout]:
    """Each core count with as many threads, then each core count but the first with each `(intra, inter)`."""
    layouts = [Layout(n, n, n) for n in cores]
    for n in cores[1:]:
        for intra, inter in threads:
            if Layout(n, intra, inter) not in layouts:
                layouts.append(Layout(n, intra, inter))
    return layouts


def run_once(layout: Layout, data_dir: str, steps: int, batch_size: int, workdir: str) -> Dict:
    """One `deepfm.train` run on the first `layout.vcpus` vCPUs this process may use; its rate and traced medians."""
    cores = layout.vcpus
    vcpus = sorted(os.sched_getaffinity(0))[:cores]
    model_dir = os.path.join(workdir, "model")
    shutil.rmtree(model_dir, ignore_errors=True)
    progress = os.path.join(workdir, "progress.jsonl")
    if os.path.exists(progress):
        os.remove(progress)
    command = ["taskset", "-c", ",".join(str(v) for v in vcpus), sys.executable, "-m", "deepfm.train",
               "--train_data", data_dir, "--val_data=", "--model_dir", model_dir, "--batch_size", str(batch_size),
               "--max_steps", str(steps), "--intra_op_threads", str(layout.intra),
               "--inter_op_threads", str(layout.inter),
               "--trace_steps", str(TRACE_STEPS), "--save_checkpoints_steps", str(10 * steps),
               "--log_every_n_steps", str(LOG_EVERY_STEPS), "--progress_file", progress]
    env = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", workdir),
           "PYTHONPATH": ROOT}
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with common.ProcessTreeSampler(process.pid, MEMORY_SAMPLE_S) as sampler:
        try:
            _, stderr = process.communicate(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            raise
    if process.returncode:
        raise RuntimeError("deepfm.train on %s failed (exit %d):\n%s"
                           % (layout.label, process.returncode, stderr[-3000:]))
    peak_rss_mb = max((p.peak_rss_bytes for p in sampler.processes), default=0) / 2 ** 20
    records = [r for r in hooks.read_progress_file(progress) if r.global_step > RATE_FROM_STEP]
    if not records:
        raise RuntimeError("no progress after step %d in %s: raise --steps (%d)" % (RATE_FROM_STEP, progress, steps))
    # Intervals of equal steps: the rate of their sum is the harmonic mean of their rates.
    rate = len(records) / sum(1.0 / r.examples_per_sec for r in records)
    summary = step_trace.read_summary(os.path.join(model_dir, "traces", "main" + step_trace.SUMMARY_SUFFIX))
    median = summary["median"]
    path = median[step_trace.CRITICAL_PATH]
    traced = {"span_ms": median["span_ms"], "work_ms": path["work_ms"],
              "critical_path_ms": path["critical_path_ms"], "parallelism": path["parallelism"]}
    return {"cores": cores, "intra": layout.intra, "inter": layout.inter, "vcpus": vcpus, "examples_per_sec": rate,
            "traced": traced, "peak_rss_mb": peak_rss_mb,
            "critical_ops": summary["steps"][0][step_trace.CRITICAL_PATH]["critical_ops"]}


def _cell(values: Sequence[float], spec: str = ".1f") -> str:
    return common.Stats(list(values)).fmt(spec)


def report_body(layouts: Sequence[Layout], rounds: List[Dict[str, Dict]], batch_size: int, steps: int,
                topology: topology_lib.Topology) -> str:
    """The report's table and the one-core bound against the measured speed-ups."""
    base_layout = layouts[0]
    base, base_key = base_layout.vcpus, base_layout.label
    rows = []
    for layout in layouts:
        key, n = layout.label, layout.vcpus
        runs = [r[key] for r in rounds]
        rates = [r["examples_per_sec"] for r in runs]
        speedups = [r[key]["examples_per_sec"] / r[base_key]["examples_per_sec"] for r in rounds]
        inflation = [r[key]["traced"]["work_ms"] / r[base_key]["traced"]["work_ms"] for r in rounds]
        bounds = [critical_path.CriticalPath(r[base_key]["traced"]["work_ms"],
                                             r[base_key]["traced"]["critical_path_ms"], ()).speedup_bound(n // base)
                  for r in rounds]
        rows.append(["%d" % n, "%d/%d" % (layout.intra, layout.inter), _cell(rates, ",.0f"), _cell(speedups, ".2f"),
                     _cell(bounds, ".2f"),
                     _cell([r["traced"]["span_ms"] for r in runs]), _cell([r["traced"]["work_ms"] for r in runs]),
                     _cell([r["traced"]["critical_path_ms"] for r in runs]),
                     _cell([r["traced"]["parallelism"] for r in runs], ".2f"), _cell(inflation, ".2f")])
    table = common.markdown_table(
        ["vCPUs", "threads intra/inter", "examples/sec", "x %d vCPU" % base, "bound from %d vCPU's graph" % base,
         "traced span ms", "work ms", "critical path ms", "parallelism", "work x %d vCPU's" % base], rows)
    longest = rounds[0][base_key]["critical_ops"]
    ops = ", ".join("`%s` (%s) %.2f ms" % (op["name"], op["op"], op["ms"]) for op in longest)
    return "\n".join([
        "`single` (DeepFM at the defaults: embedding 32, layers 128-64-32, lazy_adam), batch %s, pinned to n "
        "vCPUs with `taskset` and n TensorFlow threads (intra and inter op) unless the row says other threads; %d"
        " round(s), interleaved, each a fresh `deepfm.train` of %d steps; examples/sec over the progress "
        "intervals after step %d; %d traced steps (after %d) per run, their medians. Work: the ops' summed time; "
        "critical path: the longest chain of dependent ops of the step's partition graphs; parallelism: work / "
        "critical path; bound: what n vCPUs could give were every op as fast as on %d and the threads always busy"
        " (work / max(critical path, work / n) of the %d-vCPU traces). Median (min-max) over rounds." % (
            "{:,}".format(batch_size), len(rounds), steps, RATE_FROM_STEP, TRACE_STEPS,
            step_trace.DEFAULT_WARMUP_STEPS, base, base),
        "", table, "",
        "Longest ops on the critical path on %d vCPU (first round): %s." % (base, ops), "",
        "Topology: %s" % topology.describe(sorted(os.sched_getaffinity(0))), ""])


def parse_cores(text: str) -> Tuple[int, ...]:
    """The vCPU counts of `--cores`.

    Raises:
      ValueError: not counts, out of range, or not multiples of the first.
    """
    try:
        cores = tuple(int(c) for c in text.split(","))
    except ValueError:
        raise ValueError("--cores takes vCPU counts separated by commas, got %r" % text) from None
    available = len(os.sched_getaffinity(0))
    if not cores or min(cores) < 1 or max(cores) > available:
        raise ValueError("--cores %s: each must be in [1, %d], the vCPUs this process may use" % (cores, available))
    if any(n % cores[0] for n in cores):
        raise ValueError("--cores %s: each must be a multiple of the first (the base)" % (cores,))
    return cores


def parse_threads(text: str) -> Tuple[Tuple[int, int], ...]:
    """The intra/inter thread pairs of `--threads`.

    Raises:
      ValueError: not pairs of counts >= 1.
    """
    try:
        threads = tuple(tuple(int(t) for t in pair.split("/")) for pair in text.split(",") if pair)
    except ValueError:
        raise ValueError("--threads takes intra/inter pairs separated by commas (e.g. 1/2,2/1), got %r"
                         % text) from None
    if any(len(pair) != 2 or min(pair) < 1 for pair in threads):
        raise ValueError("--threads %r: each must be intra/inter, both >= 1" % (threads,))
    return tuple((pair[0], pair[1]) for pair in threads)


@dataclasses.dataclass(frozen=True)
class StepParallelismConfig(harness.HarnessConfig):
    """The benchmark's options (its flags)."""

    rounds: int = config_flags.field(DEFAULT_RUNS, "Rounds; each trains every layout once, interleaved.",
                                     flag="runs")
    cores: str = config_flags.field(",".join(str(c) for c in DEFAULT_CORES),
                                    "vCPU counts, comma-separated, the first the base.")
    threads: str = config_flags.field("", "intra/inter thread counts, comma-separated (e.g. 1/2,2/1), run "
                                          "again on each vCPU count but the first.")
    steps: int = config_flags.field(DEFAULT_STEPS, "Steps per run (more than %d)." % RATE_FROM_STEP)
    batch_size: int = config_flags.field(DEFAULT_BATCH, "Examples per step.")
    data_dir: str = config_flags.field(scale_out_config.DEFAULT_DATA_DIR, "The synthetic dataset.")
    rows: int = config_flags.field(scale_out_config.DEFAULT_ROWS, "Rows generated when --data_dir is missing.")

    def __post_init__(self):
        super().__post_init__()
        parse_cores(self.cores)
        parse_threads(self.threads)
        if self.steps <= RATE_FROM_STEP:
            raise ValueError("--steps must be > %d (the rate counts the steps after it), got %d"
                             % (RATE_FROM_STEP, self.steps))


@dataclasses.dataclass
class LayoutVariant(harness.Variant):
    """`single` on one layout, a fresh `deepfm.train` per round."""

    layout: Layout
    config: StepParallelismConfig
    workdir: str

    @property
    def name(self) -> str:  # type: ignore[override]
        return self.layout.label

    def measure(self, round_index: int) -> harness.Measurement:
        run = run_once(self.layout, self.config.data_dir, self.config.steps, self.config.batch_size, self.workdir)
        metrics = dict({RATE: run[RATE]}, **{key: run["traced"][key] for key in TRACED})
        return harness.Measurement(metrics, run["peak_rss_mb"], run)


def benchmark(config: StepParallelismConfig) -> int:
    """Runs the benchmark; returns the exit status."""
    common.ensure_data(config.data_dir, config.rows, common.FEATURE_SIZE)
    topology = topology_lib.read()
    name = config.name or NAME
    with tempfile.TemporaryDirectory() as workdir:
        layouts = plan(parse_cores(config.cores), parse_threads(config.threads))
        variants = common.select_variants(config.variants, [LayoutVariant(layout, config, workdir)
                                                            for layout in layouts])
        results = harness.run(variants, config.rounds, config.warmup_rounds)
    if results.failures:
        raise RuntimeError("\n".join("%s: %s" % item for item in results.failures.items()))
    chosen = [v.layout for v in variants]
    rounds = [{label: dict(results.details[label][index]) for label in results.names}
              for index in range(results.rounds_run)]
    record = harness.machine_record()
    body = report_body(chosen, rounds, config.batch_size, config.steps, topology)
    args = dict(dataclasses.asdict(config), cores=parse_cores(config.cores), threads=parse_threads(config.threads))
    del args["results_dir"]
    raw = {"args": args, "rounds": rounds,
           "topology": topology.as_dict()}
    common.write_report(name, TITLE, body, record, json.loads(json.dumps(raw)), results_dir=config.results_dir)
    print(os.path.join(config.results_dir, name + ".md"))
    return 0


if __name__ == "__main__":
    harness.main(StepParallelismConfig, benchmark)
