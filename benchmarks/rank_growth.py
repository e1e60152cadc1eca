"""Growth with ranks: `horovod` and `hybrid` at 2, 4 and 8 ranks sharing two cores, against `single` on one.

    python -m benchmarks.rank_growth [--runs 3] [--steps 40] [--warmup_steps 10] [--variants a,b]
                                     [--data_dir data/synthetic_300k] [--batch_size 1024]
                                     [--train_flag=--large_batch_rule=cowclip]
                                     [--shared_cores 2 | --shared_cores 0 --cores_per_host C --ranks_per_host R]

What a rank costs as the job grows, with the hardware held fixed: N Horovod
ranks (one TensorFlow thread each) share the machine's first two cores, and
`single` (one TensorFlow thread) runs on one of them. Each rank runs in an
emulated host of its own (`jobs.local.hosts`, the machinery of
`benchmarks.scale_out`: `algo-1` ... `algo-8`, every one pinned to the same
two cores, a 25 Gbit/s token bucket each), so each rank's bytes are its own
host's interface counters. Needs root.

Per variant, in the window where every rank is past warm-up (medians over
interleaved rounds, min-max):

* MB each rank sends per step: every host's `eth0` tx bytes in the window /
  every rank's steps in it;
* CPU-seconds per 1,000 examples: every process of the job (the ranks,
  with Horovod's and Gloo's threads);
* efficiency: examples/sec / (2 cores x `single`'s examples/sec in the
  same round).

The growth of a strategy is its figure at 8 ranks over its figure at 2. The
goals: `hybrid`'s bytes per rank grow at most `TARGET_BYTES_GROWTH` from 2 to
8 ranks, and its CPU per example at 8 ranks is at most `TARGET_CPU_VS_SINGLE`
times `single`'s.

The variants `*@2/gloo`, `*@2/mpi`, `*@2/mpi_tcp` and `*@2/mpi_yield`
compare the controllers: both ranks in one host (`algo-1`, both cores),
started by `horovodrun --gloo`, `horovodrun --mpi` (Open MPI's choice:
shared memory between the two local ranks), `--mpi` with TCP only, or
`--mpi` with `-mca mpi_yield_when_idle 1` (a rank waiting for its peers
gives its core up instead of spinning on it); their bytes are
the host's loopback counters (zero where MPI uses shared memory). The
variants `*@2/threads2` give each of 2 ranks two TensorFlow threads.

With `--shared_cores 0` the hosts are of cores of their own instead, as
in `benchmarks.scale_out`: hosts of `--cores_per_host` vCPUs with
`--ranks_per_host` ranks each (`hybrid@8` with 2 ranks per host: 4 hosts),
every rank pinned to its share of its host's cores with as many TensorFlow
threads, `single` on the cores of one rank, and the efficiency counted
against ranks x `single`.

Every process runs warm-up + steps steps (a rate measurement: the variants
train different numbers of examples, and no evaluation runs). The results
JSON records the machine's topology (`lscpu -e`, `lscpu`). Results go to
`benchmarks/results/rank_growth.{md,json,png}`.
"""

import dataclasses
import os
from typing import Dict, List, Optional, Sequence, Tuple

from absl import app

from benchmarks import common, harness, scale_out
from benchmarks import topology as topology_lib
from benchmarks.scale_out import cli as scale_out_cli
from benchmarks.scale_out import report as scale_out_report
from cli import config_flags
from strategies import strategy_names as names

NAME = "rank_growth"
DEFAULT_RUNS = 3
DEFAULT_STEPS = 40
DEFAULT_WARMUP_STEPS = 10
SHARED_CORES = 2
RANK_COUNTS = (2, 4, 8)
ONE_THREAD = ("--intra_op_threads", "1", "--inter_op_threads", "1")
TWO_THREADS = ("--intra_op_threads", "2", "--inter_op_threads", "2")
# Every variant: no evaluation (a rate measurement); on shared cores one TensorFlow thread unless the variant
# says otherwise (on cores of their own, the layout sets a rank's threads from its cores).
RUN_FLAGS = ("--val_data=",)
# Horovod cycle times tried at the largest number of ranks (Horovod's default: 1 ms).
CYCLE_TIMES_MS = (5, 10)
TARGET_BYTES_GROWTH = 1.3
TARGET_CPU_VS_SINGLE = 1.25
SMALLEST, LARGEST = RANK_COUNTS[0], RANK_COUNTS[-1]
STRATEGIES = (names.HOROVOD, names.HYBRID)


PROGRAM = "benchmarks.rank_growth"


@dataclasses.dataclass(frozen=True)
class RankGrowthOptions(scale_out.RunOptions):
    """`python -m benchmarks.rank_growth`'s options."""

    rounds: int = config_flags.field(DEFAULT_RUNS, "Runs of every variant, interleaved.", flag="runs")
    name: str = config_flags.field(NAME, "The report's file name, without extension.")
    steps: int = config_flags.field(DEFAULT_STEPS, "Timed steps of every process.")
    warmup_steps: int = config_flags.field(DEFAULT_WARMUP_STEPS, "Steps of every process before the window.")
    shared_cores: int = config_flags.field(SHARED_CORES, "Every host on the same first N cores (0: hosts of "
                                                         "--cores_per_host cores of their own).")


def variant_name(strategy: str, ranks: int, lever: str = "") -> str:
    """`hybrid@8`, `hybrid@2/mpi`: a strategy at a number of ranks, with a lever."""
    return "%s@%d%s" % (strategy, ranks, "/" + lever if lever else "")


def all_variants(ranks_per_host: int = 1) -> Tuple[scale_out.Variant, ...]:
    """`single`, each strategy at 2, 4 and 8 ranks, then the controller, thread and cycle levers.

    Args:
      ranks_per_host: ranks per host: `@N` runs N ranks in N / ranks_per_host
        hosts (rank counts it does not divide are left out).
    """
    variants = [scale_out.Variant(scale_out.BASELINE, names.SINGLE, "1 process on the cores of one rank")]
    counts = [ranks for ranks in RANK_COUNTS if ranks % ranks_per_host == 0]
    where = "1 host each" if ranks_per_host == 1 else "%d per host" % ranks_per_host
    for strategy in STRATEGIES:
        for ranks in counts:
            variants.append(scale_out.Variant(
                variant_name(strategy, ranks), strategy, "%d ranks, %s, Gloo" % (ranks, where),
                hosts=ranks // ranks_per_host))
    for strategy in STRATEGIES:
        for launcher, what in ((scale_out.LAUNCH_GLOO, "horovodrun --gloo"),
                               (scale_out.LAUNCH_MPI, "horovodrun --mpi (shared memory)"),
                               (scale_out.LAUNCH_MPI_TCP, "horovodrun --mpi, TCP only"),
                               (scale_out.LAUNCH_MPI_YIELD, "horovodrun --mpi, waits yield the core")):
            variants.append(scale_out.Variant(
                variant_name(strategy, SMALLEST, launcher), strategy, "%d ranks in 1 host, %s" % (SMALLEST, what),
                hosts=1, ranks_per_host=SMALLEST, launcher=launcher))
        if SMALLEST in counts:
            variants.append(scale_out.Variant(
                variant_name(strategy, SMALLEST, "threads2"), strategy,
                "%d ranks, %s, Gloo, 2 threads each" % (SMALLEST, where), TWO_THREADS,
                hosts=SMALLEST // ranks_per_host))
        if LARGEST in counts:
            for cycle_ms in CYCLE_TIMES_MS:
                variants.append(scale_out.Variant(
                    variant_name(strategy, LARGEST, "cycle%gms" % cycle_ms), strategy,
                    "%d ranks, %s, Gloo, --hvd_cycle_time_ms %g" % (LARGEST, where, cycle_ms),
                    ("--hvd_cycle_time_ms", "%g" % cycle_ms), hosts=LARGEST // ranks_per_host))
    return tuple(variants)


def make_config(args: RankGrowthOptions) -> scale_out.BenchmarkConfig:
    """The `scale_out.BenchmarkConfig` of the options: the same steps everywhere, shared cores by default.

    Raises:
      ValueError: a bad argument; the message names it and its value.
    """
    scale_out_cli.check_least((
        ("runs", args.rounds, 1), ("steps", args.steps, 2 * scale_out.LOG_EVERY_STEPS),
        ("warmup_steps", args.warmup_steps, 0), ("timeout_s", args.timeout_s, 1), ("batch_size", args.batch_size, 1),
        ("shared_cores", args.shared_cores, 0), ("cores_per_host", args.cores_per_host, 1),
        ("ranks_per_host", args.ranks_per_host, 1)))
    variants = tuple(common.select_variants(args.variants, all_variants(args.ranks_per_host)))
    scale_out.check_train_flags(args.train_flag)
    threads = ONE_THREAD if args.shared_cores else ()
    config = scale_out.BenchmarkConfig(
        data_dir=os.path.abspath(args.data_dir), rows=args.rows, runs=args.rounds, steps=args.steps,
        warmup_steps=args.warmup_steps, link_gbps=scale_out.DEFAULT_LINK_GBPS, variants=variants,
        results_dir=args.results_dir, name=args.name, timeout_s=args.timeout_s, shared_note=args.shared_note,
        batch=args.batch_size, train_flags=RUN_FLAGS + threads + tuple(args.train_flag),
        shared_cores=args.shared_cores, same_steps=True, cores_per_host=args.cores_per_host,
        ranks_per_host=args.ranks_per_host, hosts_mode=args.hosts_mode, host_memory=args.host_memory,
        warmup_rounds=args.warmup_rounds)
    scale_out_cli.check_hosts_mode(config)
    return config


def growth(rows: Dict[str, Dict], strategy: str, field: str) -> Optional[float]:
    """`strategy`'s `field` at the most ranks over its `field` at the fewest; None if either is missing."""
    small, large = rows.get(variant_name(strategy, SMALLEST)), rows.get(variant_name(strategy, LARGEST))
    if not small or not large or not small[field]:
        return None
    return large[field] / small[field]


def report_body(config: scale_out.BenchmarkConfig, results: Dict[str, List[scale_out.RunResult]],
                failures: Dict[str, List[str]], load: Optional[Tuple[float, float]],
                topology: Optional[topology_lib.Topology] = None) -> str:
    """The markdown of the report: set-up, table, growth and the goals."""
    rows = scale_out.summary_rows(config, results)
    table = []
    for variant in config.variants:
        failed = len(failures.get(variant.name, []))
        note = " (%d of %d runs failed)" % (failed, config.runs) if failed else ""
        row = rows.get(variant.name)
        if row is None:
            table.append([variant.name, variant.note, variant.shape(), "failed" + note] + ["n/a"] * 5)
            continue
        runs = results[variant.name]
        table.append([
            variant.name, variant.note, variant.shape(), row["stats"].fmt() + note,
            row["efficiency_stats"].fmt(".2f") if row["efficiency"] is not None else "n/a",
            _stats(runs, "cpu_seconds_per_1k").fmt(".3f"),
            _stats(runs, "tx_bytes_per_step", scale_out.MB).fmt(".2f") if variant.processes > 1 else "-",
            "%.1f" % row["step_ms"],
            "n/a" if row["other_cores"] is None else "%.2f" % row["other_cores"]])
    header = ["variant", "what", "ranks x cores", "examples/sec median (min-max)",
              "efficiency vs %s x single (min-max)" % (config.shared_cores or "ranks"),
              "CPU-s per 1k examples (min-max)", "MB sent per step per rank (min-max)", "step ms of a rank",
              "other load (cores)"]
    sections = [_setup_text(config, load), scale_out_report.topology_text(config, topology),
                common.markdown_table(header, table), _goal_text(config, rows)]
    return "\n\n".join(s for s in sections if s)


def _stats(runs: Sequence[scale_out.RunResult], field: str, unit: float = 1.0) -> common.Stats:
    return common.Stats([getattr(r, field) / unit for r in runs])


def _setup_text(config: scale_out.BenchmarkConfig, load: Optional[Tuple[float, float]]) -> str:
    if config.shared_cores:
        where = ("N Horovod ranks, each in an emulated host of its own (`jobs.local.hosts`, a 25 Gbit/s token bucket "
                 "per host, no latency model), every host pinned to the same %d cores; `single` on one of them. One "
                 "TensorFlow thread per process (`--intra_op_threads 1 --inter_op_threads 1`) unless the variant "
                 "says otherwise." % config.shared_cores)
        efficiency = "%d x `single`'s" % config.shared_cores
    else:
        where = ("N Horovod ranks in %s, %s; `single` on the cores of one rank." % (
            scale_out_report.hosts_text(config), config.layout_text()))
        efficiency = "ranks x `single`'s"
    return (
        "%s DeepFM at the defaults on `%s`, per-replica batch %s%s, no evaluation; %d run(s) per variant, "
        "interleaved, each a fresh set of processes; every process runs %d warm-up + %d timed steps. MB sent per "
        "step per rank: the hosts' interface tx bytes in the window / the ranks' steps (`/x` variants in one host: "
        "its loopback bytes). CPU-s per 1k examples: every process of the job. Efficiency: examples/sec / (%s "
        "in the same round), median over rounds. Other load: the machine's CPU in the window not used "
        "by the job, in cores.%s %s" % (
            where, os.path.basename(config.data_dir), format(config.batch, ","),
            "".join(", `%s`" % flag for flag in config.train_flags if flag not in RUN_FLAGS + ONE_THREAD),
            config.runs, config.warmup_steps, config.steps, efficiency,
            " 1-minute load average before / after: %.2f / %.2f." % tuple(load) if load else "",
            config.shared_note))


def _goal_text(config: scale_out.BenchmarkConfig, rows: Dict[str, Dict]) -> str:
    lines = []
    for strategy in STRATEGIES:
        tx, cpu = growth(rows, strategy, "tx_mb_per_step"), growth(rows, strategy, "cpu_s_per_1k")
        if tx is None or cpu is None:
            continue
        lines.append("- `%s` from %d to %d ranks: bytes per rank x%.2f, CPU per example x%.2f" % (
            strategy, SMALLEST, LARGEST, tx, cpu))
    hybrid_tx = growth(rows, names.HYBRID, "tx_mb_per_step")
    if hybrid_tx is not None:
        lines.append("- goal: `hybrid`'s bytes per rank within x%.2f from %d to %d ranks: %s (x%.2f)" % (
            TARGET_BYTES_GROWTH, SMALLEST, LARGEST, "met" if hybrid_tx <= TARGET_BYTES_GROWTH else "not met",
            hybrid_tx))
    largest, single = rows.get(variant_name(names.HYBRID, LARGEST)), rows.get(scale_out.BASELINE)
    if largest and single:
        ratio = largest["cpu_s_per_1k"] / single["cpu_s_per_1k"]
        lines.append("- goal: `hybrid`'s CPU per example at %d ranks within x%.2f of `single`'s: %s (x%.2f)" % (
            LARGEST, TARGET_CPU_VS_SINGLE, "met" if ratio <= TARGET_CPU_VS_SINGLE else "not met", ratio))
    return "Growth (ratios of medians):\n" + "\n".join(lines) if lines else ""


def write_chart(config: scale_out.BenchmarkConfig, results: Dict[str, List[scale_out.RunResult]]) -> Optional[str]:
    """Bars of CPU-seconds per 1,000 examples; the dashed line is the goal, x1.25 `single`'s."""
    shown = [v.name for v in config.variants if results.get(v.name)]
    if not shown:
        return None
    reference = None
    if results.get(scale_out.BASELINE):
        reference = TARGET_CPU_VS_SINGLE * _stats(results[scale_out.BASELINE], "cpu_seconds_per_1k").median
    where = ("sharing %d cores" % config.shared_cores if config.shared_cores
             else "in hosts of %d cores, %d per host" % (config.cores_per_host, config.ranks_per_host))
    return common.bar_chart(config.name, "DeepFM, N ranks %s, batch %s per rank" % (
        where, format(config.batch, ",")), shown,
        [_stats(results[name], "cpu_seconds_per_1k") for name in shown], "CPU-seconds per 1,000 examples",
        reference, "%.2f x single" % TARGET_CPU_VS_SINGLE, results_dir=config.results_dir)


def parse_args(argv: Sequence[str]) -> RankGrowthOptions:
    """The options of a command line (without the program's name).

    Raises:
      ValueError: a value the options refuse.
    """
    return harness.options(RankGrowthOptions, [PROGRAM] + list(argv))


def run(args: RankGrowthOptions) -> int:
    """Measures (or, with `report_only`, reports again) and writes the report; returns the exit status.

    Raises:
      app.UsageError: a bad option, or what stops the runs before they start.
    """
    try:
        config = make_config(args)
    except ValueError as e:
        raise app.UsageError(str(e)) from e
    if args.report_only:
        results, failures, _ = scale_out.load_results(args.report_only)
        setup = scale_out.load_setup(args.report_only)
        load = setup.get("load_average")
        config = dataclasses.replace(config, hosts_mode=setup.get("hosts_mode", config.hosts_mode))
        topology = topology_lib.Topology.from_dict(setup.get("topology"))
    else:
        topology = topology_lib.read()
        reason = scale_out_cli.start_checks(config, topology)
        if reason:
            raise app.UsageError(reason)
        common.ensure_data(config.data_dir, config.rows, common.FEATURE_SIZE)
        scale_out.exit_on_sigterm()
        load_before = os.getloadavg()[0]
        config, results, failures, _ = scale_out_cli.run_measurement(config, topology)
        load = (load_before, os.getloadavg()[0])
    body = report_body(config, results, failures, load, topology)
    info = scale_out.report_machine(args.report_only or None)
    info["cores used"] = ("%d, shared by every rank (pinned)" % config.shared_cores if config.shared_cores
                          else "%d hosts, %s" % (config.num_hosts, config.layout_text()))
    common.write_report(config.name, "Growth with ranks" + (" on shared cores" if config.shared_cores else ""),
                        body, info, scale_out.raw_results(config, results, failures, None, load, topology),
                        results_dir=config.results_dir)
    write_chart(config, results)
    print(body)
    return 1 if any(failures.values()) else 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """`run` of the process's command line, or of `argv` (without the program's name; see `harness.main_or_run`)."""
    return harness.main_or_run(RankGrowthOptions, run, PROGRAM, argv)


if __name__ == "__main__":
    main()
