"""The table of issue 33's goals on a machine of many cores, in one command that ends before a deadline.

    python -m benchmarks.multicore [--results_dir DIR] [--budget_s 540] [--runs 3]
                                   [--cores_per_host 4] [--hosts 2,4] [--strategies hybrid,horovod]
                                   [--batches 1024,8192] [--steps 100,30] [--warmup_steps 20,10]
                                   [--layouts 2,4,8,16] [--layout_strategies hybrid] [--mpi_hosts hybrid]
                                   [--hosts_mode auto] [--data_dir data/synthetic_300k] [--plan_only]

Two tables, measured in interleaved rounds on one set of hosts
(`benchmarks.scale_out`'s machinery: emulated hosts where they can be made,
else blocks of this machine's cores; no bandwidth limit), every process a
rate measurement (warm-up + timed steps, no evaluation):

* hosts of `--cores_per_host` C vCPUs (one rank each, C TensorFlow threads):
  `single` on C vCPUs, and each of `--strategies` at each of `--hosts`, at
  each of `--batches` (from `LARGE_BATCH` on with `--large_batch_flag`,
  CowClip): efficiency = the job's examples/sec over ranks x `single`'s on C
  vCPUs in the same round, median over rounds; each of `--mpi_hosts` also
  over MPI with yielding waits, its ranks started by `mpirun` over ssh as
  SageMaker's toolkit does (emulated hosts only);
* one host of all N vCPUs, at the first batch: `single` on 1, C and N
  vCPUs, and each of `--layout_strategies` as R ranks of N/R vCPUs for each
  R of `--layouts`: examples/sec over one core's (`single` 1x1) in the same
  round, median over rounds;
* at the first batch, each of `--one_vcpu_hosts` at 2 hosts of one vCPU
  (against `single` 1x1): what a rank's further cores give its exchange,
  which the cost model's `CoreCosts` are fitted to (`deepfm.advise
  --fit_cores_to`).

The defaults follow the machine: N = the vCPUs this process may use, C =
min(4, N / 2), hosts 2 and N / C, layouts the powers of two up to N that
divide it. On a 16-vCPU machine that is the issue's table (hosts of 4: 2
and 4 hosts, `hybrid` also over MPI; one host: 1x1, 1x4, 1x16, 2x8, 4x4,
8x2, 16x1, `single` also with its tables partitioned; `hybrid` at 2 hosts
of 1): 23 runs a round; on the 2-core development machine hosts of one
core, 2 hosts, layout 2x1: 11 runs (`--plan_only` lists them).

Rounds run until `--runs` or until `--budget_s` seconds after the start
(data generation included): a run that would end after it, by the time the
same run took in an earlier round, is skipped, and each run's timeout ends
at it. The results (`multicore.md` and `.json`, `lscpu-e.txt`, `lscpu.txt`)
are written under `--results_dir` at the start and again after every run,
so that whatever ran is there when the command is stopped. `--plan_only`
prints every run and its vCPUs and exits.
"""

import dataclasses
import os
import shutil
import sys
import time
from typing import Dict, List, Optional, Sequence, Tuple

from absl import app

from benchmarks import common, harness
from benchmarks import topology as topology_lib
from benchmarks.scale_out import cli as scale_out_cli
from benchmarks.scale_out import config as config_lib
from benchmarks.scale_out import hosts as run_hosts
from benchmarks.scale_out import layout, report, runner
from benchmarks.scale_out.variants import LAUNCH_SSH_MPI_YIELD, Variant
from cli import config_flags
from strategies import strategy_names as names

PROGRAM = "benchmarks.multicore"
NAME = "multicore"
TITLE = "Hosts of several cores, and the layouts of one host"
DEFAULT_BUDGET_S = 540.0
DEFAULT_RUNS = 3
DEFAULT_BATCHES = (1024, 8192)
# Timed and warm-up steps by batch where not given: below LARGE_BATCH, and from it on.
DEFAULT_STEPS = {False: 100, True: 30}
DEFAULT_WARMUP_STEPS = {False: 20, True: 10}
DEFAULT_STRATEGIES = (names.HYBRID, names.HOROVOD)
DEFAULT_LAYOUT_STRATEGIES = (names.HYBRID,)
DEFAULT_ONE_VCPU_HOSTS = (names.HYBRID,)
DEFAULT_MPI_HOSTS = (names.HYBRID,)
DEFAULT_TIMEOUT_S = 300.0
LARGEST_DEFAULT_HOST = 4
LARGE_BATCH_FLAG = "--large_batch_rule=cowclip"
# Every run: no evaluation (a rate measurement).
RUN_FLAGS = ("--val_data=",)
LSCPU_FILES = {"lscpu_e": "lscpu-e.txt", "lscpu": "lscpu.txt"}
STRATEGY_CHOICES = names.HOROVOD_RANKS
# Issue 33's goals: efficiency of `hybrid` by (cores per host, hosts, batch from LARGE_BATCH on), and the
# examples/sec of one host's layouts over one core's by (vCPUs of the host, what).
EFFICIENCY_GOALS = {(4, 2, False): 0.85, (4, 2, True): 0.93, (4, 4, False): 0.80, (4, 4, True): 0.88,
                    (1, 2, False): 0.65, (1, 2, True): 0.85}
BEST_LAYOUT, SINGLE_ON_HOST = "best layout", "single on a host's cores"
# `--table_partitions`: one partition of each table per vCPU of the process.
PARTITIONS_PER_VCPU = "cores"
SPEEDUP_GOALS = {(16, BEST_LAYOUT): 8.0, (16, SINGLE_ON_HOST): 3.0, (2, SINGLE_ON_HOST): 1.8}
# What issue 33 measured before (one round, 16 vCPUs, `horovodrun --gloo` on one machine): efficiency by
# (strategy, cores per host, hosts, batch), and one host's examples/sec over one core's.
BEFORE = {(names.HYBRID, 4, 2, 1024): 0.57, (names.HOROVOD, 4, 2, 1024): 0.57, (names.HYBRID, 4, 4, 1024): 0.50,
          (names.HOROVOD, 4, 4, 1024): 0.37, (names.HYBRID, 4, 2, 8192): 0.83, (names.HOROVOD, 4, 2, 8192): 0.57,
          (names.HYBRID, 4, 4, 8192): 0.67, (names.HOROVOD, 4, 4, 8192): 0.36}
BEFORE_SPEEDUP = {(16, "single 1x4"): 2.36, (16, "hybrid 4x4 on 1 host"): 4.7}


@dataclasses.dataclass(frozen=True)
class Entry:
    """One run of a round: a variant at a batch, in one of the two tables.

    Attributes:
      key: its label in the results (`<batch>/<variant>`).
      table: `HOSTS_TABLE` or `HOST_TABLE`.
      config: the run's set-up (batch, steps, layout).
      variant: the variant, at its layout.
      reference: the key of `single` on the cores of one of its ranks at its
        batch, which its efficiency divides by ("" for `single` itself).
    """

    key: str
    table: str
    config: config_lib.BenchmarkConfig
    variant: Variant
    reference: str = ""


HOSTS_TABLE, HOST_TABLE = "hosts", "one host"


@dataclasses.dataclass(frozen=True)
class Plan:
    """Every run of a round, and how the tables read them.

    Attributes:
      entries: the runs of a round, in order (the goals' rows first).
      cores: N, the vCPUs used.
      cores_per_host: C.
      one_core: the key of `single` on one vCPU (the one-host table's reference).
      host_keys: the rows of the one-host table, in order (`single` on C vCPUs is the hosts table's run).
    """

    entries: Tuple[Entry, ...]
    cores: int
    cores_per_host: int
    one_core: str
    host_keys: Tuple[str, ...]


def _ints(text: str, flag: str, least: int = 1) -> Tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ValueError("--%s %r: give comma-separated whole numbers, e.g. 2,4" % (flag, text)) from None
    if not values or min(values) < least:
        raise ValueError("--%s %r: give one or more numbers >= %d" % (flag, text, least))
    return values


def _per_batch(values: Tuple[int, ...], batches: Tuple[int, ...], flag: str) -> Tuple[int, ...]:
    if len(values) == 1:
        return values * len(batches)
    if len(values) != len(batches):
        raise ValueError("--%s %s: give one value, or one per batch of --batches (%d)"
                         % (flag, ",".join(map(str, values)), len(batches)))
    return values


def default_cores_per_host(cores: int) -> int:
    """C of a machine of `cores` vCPUs: 4, or fewer so that two hosts fit (1 on 2 vCPUs)."""
    return max(1, min(LARGEST_DEFAULT_HOST, cores // 2))


def default_layouts(cores: int) -> Tuple[int, ...]:
    """The ranks per host of the one-host table: the powers of two from 2 that divide `cores`, and `cores`."""
    layouts = [ranks for ranks in (2 ** k for k in range(1, cores.bit_length())) if cores % ranks == 0]
    return tuple(sorted(set(layouts + ([cores] if cores > 1 else []))))


@dataclasses.dataclass(frozen=True)
class MulticoreOptions(harness.HarnessConfig):
    """`python -m benchmarks.multicore`'s options; `variants` names runs by key (`<batch>/<variant>`)."""

    rounds: int = config_flags.field(DEFAULT_RUNS, "Rounds, as the budget allows.", flag="runs")
    name: str = config_flags.field(NAME, "The report's file name, without extension.")
    budget_s: float = config_flags.field(DEFAULT_BUDGET_S, "Seconds from the start after which no run may end "
                                                           "(data generation included).")
    cores: int = config_flags.field(0, "vCPUs to use (0: every one this process may use).")
    cores_per_host: int = config_flags.field(0, "C, vCPUs per host (0: min(4, cores / 2)).")
    hosts: str = config_flags.field("", "Hosts of the hosts table, comma-separated (default: 2 and cores / C).")
    strategies: str = config_flags.field(",".join(DEFAULT_STRATEGIES), "Strategies of the hosts table.")
    batches: str = config_flags.field(",".join(map(str, DEFAULT_BATCHES)), "Per-replica batches.")
    steps: str = config_flags.field("", "Timed steps, one for every batch or one per batch (default: %d, and %d "
                                        "from batch %d on)." % (DEFAULT_STEPS[False], DEFAULT_STEPS[True],
                                                               config_lib.LARGE_BATCH))
    warmup_steps: str = config_flags.field("", "Warm-up steps, likewise (default: %d, and %d)."
                                           % (DEFAULT_WARMUP_STEPS[False], DEFAULT_WARMUP_STEPS[True]))
    layouts: str = config_flags.field("", "Ranks per host of the one-host table (default: the powers of two that "
                                          "divide the cores, and the cores).")
    layout_strategies: str = config_flags.field(",".join(DEFAULT_LAYOUT_STRATEGIES),
                                                "Strategies of the one-host table's layouts.")
    one_vcpu_hosts: str = config_flags.field(
        ",".join(DEFAULT_ONE_VCPU_HOSTS), "Strategies also run at 2 hosts of 1 vCPU at the first batch, where hosts "
                                          "have more: what a rank's further cores give its exchange ('' for none).")
    mpi_hosts: str = config_flags.field(
        ",".join(DEFAULT_MPI_HOSTS), "Strategies of the hosts table also run over MPI with yielding waits, their "
                                     "ranks started by mpirun over ssh as SageMaker's toolkit does (emulated hosts "
                                     "only; '' for none).")
    table_partitions: str = config_flags.field(
        PARTITIONS_PER_VCPU, "`single` on more than one vCPU also with its tables in this many partitions "
                             "(deepfm.train --table_partitions): comma-separated counts, '%s' for one per vCPU of "
                             "the process, '' for none." % PARTITIONS_PER_VCPU)
    large_batch_flag: str = config_flags.field(LARGE_BATCH_FLAG, "The deepfm.train flag of batches from %d on "
                                                                 "('' for none)." % config_lib.LARGE_BATCH)
    train_flag: Tuple[str, ...] = config_flags.field(
        (), "A flag added to every run's deepfm.train, e.g. --train_flag=--exchange_fp16 (repeat for more).",
        repeated=True)
    hosts_mode: str = config_flags.field(config_lib.HOSTS_AUTO, "emulated: network namespaces (root); local: "
                                                                "blocks of this machine's cores; auto: emulated "
                                                                "where they can be made.",
                                         choices=config_lib.HOSTS_MODES)
    data_dir: str = config_flags.field(config_lib.DEFAULT_DATA_DIR, "The synthetic dataset root.")
    rows: int = config_flags.field(config_lib.DEFAULT_ROWS, "Rows of a generated dataset.")
    timeout_s: float = config_flags.field(DEFAULT_TIMEOUT_S, "The longest one run may take.")
    plan_only: bool = config_flags.field(False, "Print every run and its vCPUs, run nothing.")


def parse_args(argv: Sequence[str]) -> MulticoreOptions:
    """The options of a command line (without the program's name).

    Raises:
      ValueError: a value the options refuse.
    """
    return harness.options(MulticoreOptions, [PROGRAM] + list(argv))


def _strategies(text: str, flag: str) -> Tuple[str, ...]:
    chosen = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    unknown = [s for s in chosen if s not in STRATEGY_CHOICES]
    if unknown:
        raise ValueError("--%s: unknown %s; one or more of %s" % (flag, ", ".join(map(repr, unknown)),
                                                                  ", ".join(STRATEGY_CHOICES)))
    return chosen


def _partitions(text: str, vcpus: int) -> Tuple[int, ...]:
    """The table partitions of `single` on `vcpus` vCPUs that `--table_partitions` asks for (none on one vCPU)."""
    if vcpus < 2 or not text.strip():
        return ()
    if text.strip() == PARTITIONS_PER_VCPU:
        return (vcpus,)
    return tuple(parts for parts in _ints(text, "table_partitions") if parts > 1)


def make_plan(args: MulticoreOptions, available: int) -> Plan:
    """Every run of a round for the options, on a machine of `available` vCPUs.

    Raises:
      ValueError: a bad argument, or a layout that needs more vCPUs than
        `--cores` (or the machine) has; the message names the flag and value.
    """
    scale_out_cli.check_least((("runs", args.rounds, 1), ("budget_s", args.budget_s, 1),
                               ("timeout_s", args.timeout_s, 1), ("cores", args.cores, 0),
                               ("cores_per_host", args.cores_per_host, 0)))
    scale_out_cli.check_train_flags(args.train_flag + ((args.large_batch_flag,) if args.large_batch_flag else ()))
    cores = args.cores or available
    if cores > available:
        raise ValueError("--cores %d: this process may use %d vCPUs" % (cores, available))
    per_host = args.cores_per_host or default_cores_per_host(cores)
    hosts = _ints(args.hosts, "hosts") if args.hosts else tuple(sorted({2, max(2, cores // per_host)}))
    if max(hosts) * per_host > cores:
        raise ValueError("--hosts %s x --cores_per_host %d need %d vCPUs; %d are used (--cores)"
                         % (",".join(map(str, hosts)), per_host, max(hosts) * per_host, cores))
    batches = _ints(args.batches, "batches")
    large = [batch >= config_lib.LARGE_BATCH for batch in batches]
    steps = (_per_batch(_ints(args.steps, "steps"), batches, "steps") if args.steps
             else tuple(DEFAULT_STEPS[is_large] for is_large in large))
    warmups = (_per_batch(_ints(args.warmup_steps, "warmup_steps", least=0), batches, "warmup_steps")
               if args.warmup_steps else tuple(DEFAULT_WARMUP_STEPS[is_large] for is_large in large))
    for value in steps:
        if value < 2 * config_lib.LOG_EVERY_STEPS:
            raise ValueError("--steps %d: at least %d (two progress lines)" % (value, 2 * config_lib.LOG_EVERY_STEPS))
    layouts = _ints(args.layouts, "layouts") if args.layouts else default_layouts(cores)
    if args.table_partitions.strip() not in ("", PARTITIONS_PER_VCPU):
        _ints(args.table_partitions, "table_partitions")
    for ranks in layouts:
        if cores % ranks:
            raise ValueError("--layouts %d: %d ranks do not divide %d vCPUs (--cores)" % (ranks, ranks, cores))
    strategies = _strategies(args.strategies, "strategies")
    layout_strategies = _strategies(args.layout_strategies, "layout_strategies")
    one_vcpu_hosts = _strategies(args.one_vcpu_hosts, "one_vcpu_hosts") if per_host > 1 else ()
    mpi_hosts = _strategies(args.mpi_hosts, "mpi_hosts")
    entries: List[Entry] = []
    seen: Dict[tuple, str] = {}

    def add(table: str, batch: int, variant: Variant, config: config_lib.BenchmarkConfig, reference: str = "") -> str:
        variant = variant.at_layout(config.cores_per_host, config.ranks_per_host)
        signature = (batch, variant.strategy, variant.num_hosts, variant.cores_per_host, variant.ranks_per_host,
                     variant.train_flags, variant.launcher)
        if signature in seen:
            return seen[signature]
        key = "%d/%s" % (batch, variant.name)
        seen[signature] = key
        entries.append(Entry(key, table, config, variant, reference))
        return key

    for index, batch in enumerate(batches):
        flags = RUN_FLAGS + ((args.large_batch_flag,) if args.large_batch_flag and batch >= config_lib.LARGE_BATCH
                             else ()) + tuple(args.train_flag)
        config = config_lib.BenchmarkConfig(
            data_dir=os.path.abspath(args.data_dir), rows=args.rows, runs=args.rounds, steps=steps[index],
            warmup_steps=warmups[index], link_gbps=0.0, variants=(), results_dir=args.results_dir,
            name=args.name, timeout_s=args.timeout_s, batch=batch, train_flags=flags, same_steps=True,
            cores_per_host=per_host, hosts_mode=args.hosts_mode, warmup_rounds=args.warmup_rounds)
        reference = add(HOSTS_TABLE, batch, Variant("single 1x%d" % per_host, names.SINGLE,
                                                    "1 process on %d vCPUs" % per_host), config)
        for count in hosts:
            for strategy in strategies:
                add(HOSTS_TABLE, batch, Variant("%s %d hosts" % (strategy, count), strategy,
                                                "%d hosts of %d vCPUs, a rank each" % (count, per_host),
                                                hosts=count), config, reference)
            for strategy in mpi_hosts:
                add(HOSTS_TABLE, batch, Variant("%s %d hosts, MPI" % (strategy, count), strategy,
                                                "%d hosts of %d vCPUs, a rank each, Horovod over MPI with yielding "
                                                "waits (mpirun over ssh)" % (count, per_host), hosts=count,
                                                launcher=LAUNCH_SSH_MPI_YIELD), config, reference)
    batch = batches[0]
    config = dataclasses.replace(entries[0].config, cores_per_host=cores, variants=())
    one_core = add(HOST_TABLE, batch, Variant("single 1x1", names.SINGLE, "1 process on 1 vCPU", cores_per_host=1),
                   config)
    for strategy in one_vcpu_hosts:
        # What a rank's further cores give the exchange: the same job on hosts of one vCPU.
        add(HOSTS_TABLE, batch, Variant("%s 2 hosts of 1" % strategy, strategy, "2 hosts of 1 vCPU, a rank each",
                                        cores_per_host=1), config, one_core)
    host_keys = [one_core]
    for count in sorted({per_host, cores}):
        host_keys.append(add(HOST_TABLE, batch, Variant("single 1x%d" % count, names.SINGLE,
                                                        "1 process on %d vCPUs" % count, cores_per_host=count), config))
        for parts in _partitions(args.table_partitions, count):
            host_keys.append(add(HOST_TABLE, batch, Variant(
                "single 1x%d, %d partitions" % (count, parts), names.SINGLE,
                "1 process on %d vCPUs, its tables in %d partitions" % (count, parts),
                ("--table_partitions", str(parts)), cores_per_host=count), config))
    for ranks in layouts:
        for strategy in layout_strategies:
            host_keys.append(add(HOST_TABLE, batch, Variant(
                "%s %dx%d on 1 host" % (strategy, ranks, cores // ranks), strategy,
                "1 host of %d vCPUs, %d ranks" % (cores, ranks), hosts=1, ranks_per_host=ranks), config))
    return Plan(entries=tuple(_named(entries, args.variants, one_core)), cores=cores, cores_per_host=per_host,
                one_core=one_core, host_keys=tuple(dict.fromkeys(host_keys)))


def _named(entries: Sequence[Entry], variants: str, one_core: str) -> List[Entry]:
    """The entries `--variants` names (all where it is empty), with the references their figures divide by.

    Raises:
      ValueError: a name that is no entry's key; the message lists the keys.
    """
    asked = [name.strip() for name in variants.split(",") if name.strip()]
    if not asked:
        return list(entries)
    keys = {entry.key: entry for entry in entries}
    unknown = [name for name in asked if name not in keys]
    if unknown:
        raise ValueError("--variants: unknown %s; the runs are %s" % (", ".join(map(repr, unknown)),
                                                                     ", ".join(keys)))
    wanted = set(asked) | {keys[name].reference for name in asked if keys[name].reference}
    if any(keys[name].table == HOST_TABLE for name in asked):
        wanted.add(one_core)
    return [entry for entry in entries if entry.key in wanted]


def check_plan(plan: Plan, order: Sequence[int]) -> Dict[str, layout.CorePlan]:
    """Every entry's `layout.CorePlan` on the vCPUs `order`.

    Raises:
      ValueError: an entry needs more vCPUs than `order` has.
    """
    return {entry.key: layout.plan(entry.variant, order) for entry in plan.entries}


def _efficiency_goal(entry: Entry, plan: Plan) -> Optional[float]:
    if entry.variant.strategy != names.HYBRID:
        return None
    return EFFICIENCY_GOALS.get((entry.variant.cores_per_host, entry.variant.num_hosts,
                                 entry.config.batch >= config_lib.LARGE_BATCH))


def _fmt(stats: Optional[common.Stats], spec: str = ".2f") -> str:
    return stats.fmt(spec) if stats else "n/a"


def _verdict(value: float, goal: Optional[float], spec: str = "%.2f") -> str:
    return "" if goal is None else " (goal >= %s: %s)" % (spec % goal, "met" if value >= goal else "not met")


def speedups(plan: Plan, results: Dict[str, List]) -> Dict[str, common.Stats]:
    """Per run of the one-host table, its examples/sec over one vCPU's (`single 1x1`) in the same round."""
    one_core = results.get(plan.one_core, [])
    entries = {entry.key: entry for entry in plan.entries}
    found = {}
    for key in plan.host_keys:
        runs = results.get(key, [])
        if runs and one_core and key != plan.one_core:
            found[key] = report.round_efficiencies(entries[key].variant, runs, one_core, 1)
    return {key: value for key, value in found.items() if value}


def report_body(plan: Plan, rounds: runner.Rounds, topology: topology_lib.Topology, order: Sequence[int],
                hosts_note: str, elapsed_s: float) -> str:
    """The two tables, the goals, the topology and where each run's processes were."""
    results = rounds.results
    by_host = speedups(plan, results)
    hosts_rows, host_rows = [], []
    entries = {entry.key: entry for entry in plan.entries}

    def cells(key: str) -> Tuple[str, str]:
        runs = results.get(key, [])
        skipped, failed = len(rounds.skipped.get(key, [])), len(rounds.failures.get(key, []))
        note = "".join([" (%d failed)" % failed if failed else "", " (%d skipped)" % skipped if skipped else ""])
        rate = report.stats(runs, "examples_per_sec") if runs else None
        return _fmt(rate, ",.0f") + note, "%.1f" % report.stats(runs, "step_ms").median if runs else "n/a"

    for key in plan.host_keys:
        variant = entries[key].variant
        rate, step = cells(key)
        before = BEFORE_SPEEDUP.get((plan.cores, variant.name))
        host_rows.append([variant.name, variant.shape(), rate, "1" if key == plan.one_core else _fmt(by_host.get(key)),
                          "-" if before is None else "%.2f" % before, step, str(len(results.get(key, [])))])
    for entry in plan.entries:
        if entry.table != HOSTS_TABLE:
            continue
        runs = results.get(entry.key, [])
        variant = entry.variant
        rate, step = cells(entry.key)
        efficiency = (report.round_efficiencies(variant, runs, results.get(entry.reference, []), variant.processes)
                      if runs and not variant.is_single else None)
        goal = _efficiency_goal(entry, plan)
        before = BEFORE.get((variant.strategy, variant.cores_per_host, variant.num_hosts, entry.config.batch))
        extra = " ".join(entry.config.train_flags[len(RUN_FLAGS):])
        hosts_rows.append([
            variant.strategy + (" over MPI, yielding waits" if variant.over_ssh else ""), variant.shape(),
            format(entry.config.batch, ",") + (" `%s`" % extra if extra else ""),
            rate, "1" if variant.is_single else _fmt(efficiency),
            "-" if goal is None else ">= %.2f%s" % (goal, "" if not efficiency else
                                                    ": " + ("met" if efficiency.median >= goal else "not met")),
            "-" if before is None else "%.2f" % before, step, str(len(runs))])
    sections = [
        "Hosts of %d vCPUs (each rank pinned to its host's vCPUs with `taskset`, as many TensorFlow threads; `single` "
        "on %d vCPUs; efficiency = examples/sec / (ranks x `single`'s in the same round), median (min-max) over "
        "rounds; before: issue 33's one round with `horovodrun --gloo` on one machine of 16 vCPUs):" % (
            plan.cores_per_host, plan.cores_per_host),
        common.markdown_table(["strategy", "ranks x vCPUs", "batch", "examples/sec median (min-max)",
                               "efficiency", "goal (hybrid)", "before", "step ms", "rounds"], hosts_rows),
        "One host of %d vCPUs (R ranks of %d/R vCPUs each, as many TensorFlow threads), batch %s: examples/sec over "
        "one vCPU's (`single 1x1`) in the same round, median (min-max) over rounds:" % (
            plan.cores, plan.cores, format(plan.entries[0].config.batch, ",")),
        common.markdown_table(["layout", "ranks x vCPUs", "examples/sec median (min-max)", "x one vCPU", "before",
                               "step ms", "rounds"], host_rows),
        _host_goals(plan, by_host),
        "Rate measurements (warm-up + timed steps per process, no evaluation: the AUC goal is measured by "
        "`benchmarks.scale_out`). Hosts: %s. %.0f s from the start to this report." % (hosts_note, elapsed_s),
        "Topology: %s.\n" % topology.describe(order) + "\n".join(
            "- `%s` (%s): %s" % (entry.key, entry.variant.shape(), layout.plan(entry.variant, order).describe())
            for entry in plan.entries)]
    return "\n\n".join(s for s in sections if s)


def _host_goals(plan: Plan, by_host: Dict[str, common.Stats]) -> str:
    """The one-host goals: the best layout, and `single` on a host's vCPUs, each over one vCPU's."""
    lines = []
    if by_host:
        best = max(by_host, key=lambda key: by_host[key].median)
        lines.append("- best layout of %d vCPUs: `%s`, %.2fx one vCPU%s" % (
            plan.cores, best, by_host[best].median,
            _verdict(by_host[best].median, SPEEDUP_GOALS.get((plan.cores, BEST_LAYOUT)), "%gx")))
    # `single` on the vCPUs of a host of the hosts table, or on all of them where those hosts have one.
    on_host = plan.cores_per_host if plan.cores_per_host > 1 else plan.cores
    prefix = "%s/single 1x%d" % (plan.one_core.split("/", 1)[0], on_host)
    # `single` as it is, or with its tables in partitions: the faster.
    candidates = [key for key in by_host if key == prefix or key.startswith(prefix + ",")]
    if candidates:
        key = max(candidates, key=lambda candidate: by_host[candidate].median)
        lines.append("- `single` on %d vCPUs (`%s`): %.2fx one vCPU%s" % (
            on_host, key, by_host[key].median,
            _verdict(by_host[key].median, SPEEDUP_GOALS.get((plan.cores, SINGLE_ON_HOST)), "%gx")))
    return "Goals of one host:\n" + "\n".join(lines) if lines else ""


def raw_results(plan: Plan, rounds: runner.Rounds, topology: topology_lib.Topology, hosts_mode: str,
                budget_s: float, elapsed_s: float) -> dict:
    """The JSON of the results: every entry's set-up and runs, what failed or was skipped, the topology."""
    return {
        "setup": {"cores": plan.cores, "cores_per_host": plan.cores_per_host, "hosts_mode": hosts_mode,
                  "budget_s": budget_s, "elapsed_s": elapsed_s, "topology": topology.as_dict(),
                  "one_core": plan.one_core},
        "entries": {entry.key: {
            "table": entry.table, "variant": entry.variant.name, "strategy": entry.variant.strategy,
            "shape": entry.variant.shape(), "hosts": entry.variant.num_hosts, "launcher": entry.variant.launcher,
            "cores_per_host": entry.variant.cores_per_host, "ranks_per_host": entry.variant.ranks_per_host,
            "batch": entry.config.batch, "steps": entry.config.steps, "warmup_steps": entry.config.warmup_steps,
            "reference": entry.reference,
            "train_flags": list(entry.config.train_flags),
            "runs": [run.as_json() for run in rounds.results.get(entry.key, [])],
            "failures": rounds.failures.get(entry.key, []), "skipped_rounds": rounds.skipped.get(entry.key, [])}
            for entry in plan.entries},
    }


def write_results(plan: Plan, rounds: runner.Rounds, topology: topology_lib.Topology, order: Sequence[int], hosts,
                  results_dir: str, name: str, budget_s: float, started: float) -> str:
    """Writes the report and its JSON under `results_dir` (again after every run); returns the report's path."""
    elapsed = time.monotonic() - started
    body = report_body(plan, rounds, topology, order,
                       "%s%s" % (hosts.mode, " (%s)" % hosts.note if hosts.note else ""), elapsed)
    info = common.machine_info()
    info["cores used"] = "%d vCPUs, hosts of %d" % (plan.cores, plan.cores_per_host)
    info["command"] = "`python -m benchmarks.multicore %s`" % " ".join(sys.argv[1:])
    return common.write_report(name, TITLE, body, info,
                               raw_results(plan, rounds, topology, hosts.mode, budget_s, elapsed),
                               results_dir=results_dir)


def write_topology(topology: topology_lib.Topology, results_dir: str) -> None:
    """`lscpu -e` and `lscpu` as text files under `results_dir`."""
    os.makedirs(results_dir, exist_ok=True)
    for field, filename in LSCPU_FILES.items():
        with open(os.path.join(results_dir, filename), "w") as f:
            f.write(getattr(topology, field) or "%s\n" % topology.note)


def describe_plan(plan: Plan, cores: Dict[str, layout.CorePlan]) -> str:
    """Every run of a round with its vCPUs, one per line."""
    return "\n".join("%-28s %-6s batch %-6d steps %d+%d  %s%s" % (
        entry.key, entry.variant.shape(), entry.config.batch, entry.config.warmup_steps, entry.config.steps,
        cores[entry.key].describe(), "" if not cores[entry.key].threads else
        ", %d TensorFlow threads" % cores[entry.key].threads) for entry in plan.entries)


def run(args: MulticoreOptions) -> int:
    """Plans, measures within the budget and writes the results; returns the exit status.

    Raises:
      app.UsageError: a bad option, or a plan this machine cannot run.
    """
    started = time.monotonic()
    topology = topology_lib.read()
    order = topology.order(topology_lib.allowed_cpus())
    try:
        plan = make_plan(args, len(order))
        reason = runner.over_ssh_reason(args.hosts_mode)
        if reason and any(entry.variant.over_ssh for entry in plan.entries):
            print("the runs over MPI (--mpi_hosts) are left out: %s" % reason, file=sys.stderr)
            plan = dataclasses.replace(plan, entries=tuple(e for e in plan.entries if not e.variant.over_ssh))
        order = order[:plan.cores]
        cores = check_plan(plan, order)
        if shutil.which(layout.TASKSET) is None:
            raise ValueError("%s is not on PATH (Debian package util-linux): it pins each rank to its vCPUs"
                             % layout.TASKSET)
    except ValueError as e:
        raise app.UsageError(str(e)) from e
    print("%s\n%d runs a round, %d round(s) at most, %.0f s budget; topology: %s" % (
        describe_plan(plan, cores), len(plan.entries), args.rounds, args.budget_s, topology.describe(order)),
        file=sys.stderr, flush=True)
    if args.plan_only:
        return 0
    if args.hosts_mode == config_lib.HOSTS_LOCAL and run_hosts.local_reason():
        raise app.UsageError(run_hosts.local_reason())
    write_topology(topology, args.results_dir)
    common.ensure_data(os.path.abspath(args.data_dir), args.rows, common.FEATURE_SIZE)
    scale_out_cli.exit_on_sigterm()
    deadline = started + args.budget_s
    count = max(entry.variant.num_hosts for entry in plan.entries)
    with run_hosts.open_hosts(args.hosts_mode, count, 0.0) as hosts:
        jobs = [runner.Job(entry.key, dataclasses.replace(entry.config, hosts_mode=hosts.mode), entry.variant)
                for entry in plan.entries]

        def write(rounds: runner.Rounds) -> None:
            write_results(plan, rounds, topology, order, hosts, args.results_dir, args.name, args.budget_s, started)

        rounds = runner.Rounds({job.key: [] for job in jobs}, {job.key: [] for job in jobs},
                               {job.key: [] for job in jobs})
        write(rounds)
        rounds = runner.run_rounds(jobs, hosts, args.rounds, order, deadline, write, warmup_rounds=args.warmup_rounds)
        path = write_results(plan, rounds, topology, order, hosts, args.results_dir, args.name, args.budget_s,
                             started)
    with open(path) as f:
        print(f.read())
    return 1 if any(rounds.failures.values()) else 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """`run` of the process's command line, or of `argv` (without the program's name; see `harness.main_or_run`)."""
    return harness.main_or_run(MulticoreOptions, run, PROGRAM, argv)


if __name__ == "__main__":
    main()
