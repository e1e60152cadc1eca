"""What one exchange costs between ranks pinned to their cores: Horovod, MPI directly, TensorFlow's collectives.

    python -m benchmarks.exchange_latency [--ranks 2] [--rows 5000] [--width 33] [--runs 3]
                                          [--cycle_times 1,0.1] [--controllers gloo,mpi,tf]
                                          [--name exchange_latency] [--results_dir DIR]

A step of `hybrid` waits on the exchanges of its critical path. This
measures one exchange on its own: each rank pinned to its own core runs one
exchange per `session.run`, `--runs` rounds with every launch interleaved
(on `benchmarks.harness`: each launch is a variant, a fresh start per round):

* `gloo`, `mpi` and `mpi_yield`, once per Horovod cycle time: ranks of
  `benchmarks.exchange_latency_rank` under `horovodrun --gloo` or `mpirun`
  (`mpi_yield`: with `-mca mpi_yield_when_idle 1`, a rank that waits in
  MPI gives its core up instead of spinning on it).
  The variants (that module's docstring): an exchange of a fixed shape (which
  Horovod's response cache holds), of a shape that changes every run (a full
  negotiation), an allreduce of the same bytes, and MPI's own `Alltoall`,
  inside the step (`tf.numpy_function`) and alone (the transport's floor);
* `tf`: TensorFlow 2.14's own collective ops in graph mode, no Horovod
  (`benchmarks.exchange_latency_collective_rank`): this program starts the
  ranks itself, each with a `TF_CONFIG` naming a cluster of free local ports
  and its task, and each rank's `tf.distribute.Server` runs the collective
  runtime over gRPC. Variants: `CollectiveAllToAllV2` of the same fixed
  shape (it has a CPU kernel in 2.14, and its `AllToAll` implementation
  sends and receives through the collective executor's remote access, gRPC
  between tasks), `CollectiveGatherV2` of each rank's rows and
  `CollectiveReduceV2` of the allreduce's bytes. Before timing, every rank
  checks every value it received.

Writes `benchmarks/results/<name>.md` and `.json`: per launch and variant the
median wall time of one run (min-max over rounds) and the CPU time of one run
summed over the rank's threads, and rank 0's peak resident memory; the
JSON also holds what each `tf` rank received from each peer in its check.
"""

import dataclasses
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional, Sequence, Tuple

from benchmarks import common, exchange_latency_rank, harness
from cli import config_flags
from jobs.local import processes

NAME = "exchange_latency"
RANK_MODULE = "benchmarks.exchange_latency_rank"
COLLECTIVE_RANK_MODULE = "benchmarks.exchange_latency_collective_rank"
# Horovod's controllers (one launch per cycle time) and TensorFlow's collective runtime (one launch).
HOROVOD_CONTROLLERS = ("gloo", "mpi", "mpi_yield")
# The mpirun options of each MPI launch.
MPI_OPTIONS = {"mpi": (), "mpi_yield": ("-mca", "mpi_yield_when_idle", "1")}
COLLECTIVES = "tf"
CONTROLLERS = HOROVOD_CONTROLLERS + (COLLECTIVES,)
COLLECTIVES_LAUNCH = "tf collectives, grpc"
# What a launch's measurement holds per exchange variant: `<variant>.<figure>`.
FIGURES = ("wall_us", "cpu_us", "p90_us")
LAUNCH_TIMEOUT_S = 600
VARIANT_ORDER = ("idle_10ms", "session", "horovod_alltoall_fixed", "horovod_alltoall_variable", "horovod_allreduce",
                 "mpi_alltoall_in_session", "mpi_alltoall", "tf_collective_alltoall", "tf_collective_gather",
                 "tf_collective_reduce")


def _names(text: str) -> List[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


@dataclasses.dataclass(frozen=True)
class ExchangeLatencyConfig(harness.HarnessConfig):
    """The benchmark's options (its flags)."""

    rounds: int = config_flags.field(3, "Rounds; each starts every launch afresh.", flag="runs")
    ranks: int = config_flags.field(2, "Ranks, each pinned to its own core (the machine needs as many).")
    rows: int = config_flags.field(5000, "Rows each rank sends every rank per exchange.")
    width: int = config_flags.field(33, "Floats per row.")
    iterations: int = config_flags.field(300, "Timed exchanges per variant and round.")
    warmup: int = config_flags.field(30, "Untimed exchanges per variant and round.")
    cycle_times: str = config_flags.field("1,0.1", "Comma-separated Horovod cycle times to measure, in ms.")
    controllers: str = config_flags.field(
        ",".join(CONTROLLERS), "Comma-separated: gloo (horovodrun --gloo), mpi (mpirun), mpi_yield (mpirun -mca "
        "mpi_yield_when_idle 1) and/or tf (TensorFlow's collective ops over gRPC, ranks started by this program).")

    def __post_init__(self):
        super().__post_init__()
        for controller in _names(self.controllers):
            if controller not in CONTROLLERS:
                raise ValueError("--controllers: %r is not one of %s" % (controller, ", ".join(CONTROLLERS)))
        if not _names(self.controllers):
            raise ValueError("--controllers: name at least one of %s" % ", ".join(CONTROLLERS))
        for cycle_time in _names(self.cycle_times):
            try:
                float(cycle_time)
            except ValueError:
                raise ValueError("--cycle_times: %r is not a number of milliseconds" % cycle_time) from None
        if self.ranks > (os.cpu_count() or 1):
            raise ValueError("--ranks %d: this machine has %d cores, one per rank is needed"
                             % (self.ranks, os.cpu_count() or 1))

    @property
    def exchange(self) -> exchange_latency_rank.Exchange:
        """What every rank exchanges and how often, as the ranks take it."""
        return exchange_latency_rank.Exchange(self.rows, self.width, self.iterations, self.warmup)


def launch_argv(controller: str, ranks: int, rank_flags: Sequence[str]) -> List[str]:
    """The command that starts `ranks` rank processes, rank r pinned to core r."""
    bin_dir = os.path.dirname(sys.executable)
    if controller in MPI_OPTIONS:
        pin = "exec taskset -c $OMPI_COMM_WORLD_RANK %s -m %s %s" % (sys.executable, RANK_MODULE, " ".join(rank_flags))
        return (["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(ranks)]
                + list(MPI_OPTIONS[controller])
                + ["-x", "PYTHONPATH", "-x", "HOROVOD_CYCLE_TIME", "-x", "TF_CPP_MIN_LOG_LEVEL", "bash", "-c", pin])
    pin = "exec taskset -c $HOROVOD_RANK %s -m %s %s" % (sys.executable, RANK_MODULE, " ".join(rank_flags))
    return [os.path.join(bin_dir, "horovodrun"), "--gloo", "-np", str(ranks), "-H", "localhost:%d" % ranks,
            "bash", "-c", pin]


def collective_rank_argv(rank: int, rank_flags: Sequence[str]) -> List[str]:
    """The command of TensorFlow collective rank `rank`, pinned to core `rank`."""
    return ["taskset", "-c", str(rank), sys.executable, "-m", COLLECTIVE_RANK_MODULE] + list(rank_flags)


def collective_tf_config(workers: Sequence[str], rank: int) -> str:
    """Rank `rank`'s `TF_CONFIG`: the cluster's one `worker` job and its own task."""
    return json.dumps({"cluster": {"worker": list(workers)}, "task": {"type": "worker", "index": rank}})


def measure_collectives(ranks: int, exchange: exchange_latency_rank.Exchange) -> Tuple[dict, List[dict]]:
    """One launch of TensorFlow collective ranks on free local ports.

    Returns:
      Rank 0's record (`results`, every variant's; `peak_rss_mb`), and each
      rank's checks (what it received from each peer), in rank order.

    Raises:
      processes.TaskFailedError: a rank failed (its log's tail in the message).
      TimeoutError: the ranks ran past `LAUNCH_TIMEOUT_S`.
    """
    work = tempfile.mkdtemp(prefix="exchange-latency-tf-")
    try:
        host = "localhost"
        workers = ["%s:%d" % (host, port) for port in processes.free_ports(ranks, host=host)]
        rank_flags = exchange.flags() + ["--output_dir=" + work]
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2",
                   PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
        with processes.ProcessGroup(os.path.join(work, "logs")) as group:
            for rank in range(ranks):
                group.start("rank%d" % rank, collective_rank_argv(rank, rank_flags),
                            env=dict(env, TF_CONFIG=collective_tf_config(workers, rank)))
            group.wait(timeout=LAUNCH_TIMEOUT_S)
        records = []
        for rank in range(ranks):
            with open(os.path.join(work, "rank%d.json" % rank)) as f:
                records.append(json.load(f))
        return records[0], [record["checks"] for record in records]
    finally:
        shutil.rmtree(work, ignore_errors=True)


def measure(controller: str, cycle_time: str, ranks: int, exchange: exchange_latency_rank.Exchange) -> dict:
    """One launch of Horovod ranks: rank 0's record (`results`, every variant's; `peak_rss_mb`)."""
    work = tempfile.mkdtemp(prefix="exchange-latency-")
    try:
        output = os.path.join(work, "rank0.json")
        rank_controller = "mpi" if controller in MPI_OPTIONS else controller
        rank_flags = exchange.flags() + ["--controller=" + rank_controller, "--output=" + output]
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ, HOROVOD_CYCLE_TIME=cycle_time, TF_CPP_MIN_LOG_LEVEL="2",
                   PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
        completed = subprocess.run(launch_argv(controller, ranks, rank_flags), env=env, cwd=root,
                                   capture_output=True, text=True, timeout=LAUNCH_TIMEOUT_S)
        if completed.returncode != 0 or not os.path.exists(output):
            raise RuntimeError("%s launch (cycle %s ms) failed with exit code %d:\n%s" % (
                controller, cycle_time, completed.returncode, (completed.stdout + completed.stderr)[-3000:]))
        with open(output) as f:
            return json.load(f)
    finally:
        shutil.rmtree(work, ignore_errors=True)


@dataclasses.dataclass
class LaunchVariant(harness.Variant):
    """One launch (a controller, and a cycle time for Horovod's), started afresh every round.

    Attributes:
      name: the variant's name for `--variants` (e.g. `gloo_1ms`, `tf`).
      label: the launch as the report names it (e.g. `gloo, cycle 1 ms`).
      checks: per round, what each `tf` rank received from each peer.
    """

    name: str
    label: str
    controller: str
    cycle_time: Optional[str]
    config: ExchangeLatencyConfig
    checks: List[List[dict]] = dataclasses.field(default_factory=list)

    def measure(self, round_index: int) -> harness.Measurement:
        c = self.config
        if self.controller == COLLECTIVES:
            record, rank_checks = measure_collectives(c.ranks, c.exchange)
            if round_index >= 0:
                self.checks.append(rank_checks)
        else:
            record = measure(self.controller, self.cycle_time or "", c.ranks, c.exchange)
        metrics = {}
        for variant, result in record["results"].items():
            metrics.update({variant + ".wall_us": result["median_us"], variant + ".cpu_us": result["cpu_us_per_run"],
                            variant + ".p90_us": result["p90_us"]})
        return harness.Measurement(metrics, record["peak_rss_mb"])


def launch_variants(config: ExchangeLatencyConfig) -> List[LaunchVariant]:
    """The launches `--controllers` and `--cycle_times` name, Horovod's first, one per cycle time."""
    controllers = _names(config.controllers)
    launches = [LaunchVariant("%s_%sms" % (controller, cycle_time), "%s, cycle %s ms" % (controller, cycle_time),
                              controller, cycle_time, config)
                for controller, cycle_time in itertools.product(
                    [c for c in controllers if c in HOROVOD_CONTROLLERS], _names(config.cycle_times))]
    if COLLECTIVES in controllers:
        launches.append(LaunchVariant(COLLECTIVES, COLLECTIVES_LAUNCH, COLLECTIVES, None, config))
    return launches


def summarize(results: harness.Results, labels: Dict[str, str]) -> Dict[str, Dict[str, dict]]:
    """Per launch (by its label) and exchange variant: the rounds' values (wall, CPU and p90, microseconds)."""
    summary: Dict[str, Dict[str, dict]] = {}
    for name in results.names:
        values = results.values[name]
        if not values:
            continue
        summary[labels[name]] = {variant: {figure: values[variant + "." + figure] for figure in FIGURES}
                                 for variant in VARIANT_ORDER if variant + ".wall_us" in values}
    return summary


def report(summary: Dict[str, Dict[str, dict]], results: harness.Results, config: ExchangeLatencyConfig,
           peaks: Dict[str, float], checks: Dict[str, list]) -> str:
    """Writes the markdown and JSON reports; returns the markdown body."""
    rows = []
    for launch, variants in summary.items():
        for variant, values in variants.items():
            rows.append([launch, "`%s`" % variant, common.Stats(values["wall_us"]).fmt(",.0f"),
                         common.Stats(values["p90_us"]).fmt(",.0f"), common.Stats(values["cpu_us"]).fmt(",.0f"),
                         "%.0f" % peaks[launch]])
    body = ("Ranks: %d, each pinned to its own core; an exchange sends %d rows of %d float32 to every rank (%s "
            "bytes to each other rank); %d timed runs per variant after %d, %d rounds (each a new launch). One "
            "`session.run` per exchange. Wall: median of one run on rank 0 (min-max over rounds); p90: the 90th "
            "percentile of one run; CPU: rank 0's process CPU per run, every thread; peak RSS: rank 0's, the "
            "largest of the rounds. Launch `%s`: TensorFlow's own collective ops in graph mode between "
            "`tf.distribute.Server`s, no Horovod.\n\n"
            % (config.ranks, config.rows, config.width, format(config.rows * config.width * 4, ","),
               config.iterations, config.warmup, results.rounds_run, COLLECTIVES_LAUNCH))
    body += common.markdown_table(["launch", "variant", "wall us", "p90 us", "CPU us per run", "peak RSS MiB"],
                                  rows)
    record = harness.machine_record()
    harness.write(results, config, NAME, "One exchange between ranks",
                  body + "\n\nCommand: `%s`\n" % record["command"], record,
                  extra={"summary": summary, "checks": checks})
    return body


def benchmark(config: ExchangeLatencyConfig) -> int:
    """Measures every launch, interleaved round by round; returns the exit status."""
    launches = common.select_variants(config.variants, launch_variants(config))
    results = harness.run(launches, config.rounds, config.warmup_rounds)
    labels = {launch.name: launch.label for launch in launches}
    peaks = {launch.label: max(results.values[launch.name][harness.PEAK_RSS_MB])
             for launch in launches if results.values[launch.name]}
    checks = {launch.label: launch.checks for launch in launches if launch.checks}
    print(report(summarize(results, labels), results, config, peaks, checks))
    return 1 if results.failures else 0


if __name__ == "__main__":
    harness.main(ExchangeLatencyConfig, benchmark)
