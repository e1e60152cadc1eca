"""The command line of `python -m benchmarks.scale_out` (flags, their checks, `main`)."""

import argparse
import dataclasses
import os
import shutil
import signal
import sys
from typing import Optional, Sequence

from benchmarks import common
from benchmarks import topology as topology_lib
from benchmarks.scale_out import hosts as run_hosts
from benchmarks.scale_out import id_capacity, layout, report, runner
from benchmarks.scale_out import variants as variants_lib
from benchmarks.scale_out.config import (
    BATCH,
    DEFAULT_DATA_DIR,
    DEFAULT_LINK_GBPS,
    DEFAULT_ROWS,
    DEFAULT_RUNS,
    DEFAULT_STEPS,
    DEFAULT_WARMUP_STEPS,
    HOSTS_EMULATED,
    HOSTS_LOCAL,
    HOSTS_MODES,
    LOG_EVERY_STEPS,
    NAME,
    RUN_TIMEOUT_S,
    BenchmarkConfig,
)
from jobs.local import hosts as hosts_lib
from jobs.local import memory as memory_lib
from strategies import strategy_names as names

DESCRIPTION = "Scale-out on emulated hosts: ps, horovod and hybrid at 2 hosts against single on the cores of one rank."


def add_train_flag_argument(parser: argparse.ArgumentParser) -> None:
    """`--train_flag` (repeatable): a flag added to every variant's `deepfm.train`."""
    parser.add_argument("--train_flag", action="append", default=[],
                        help="a flag added to every variant's deepfm.train, e.g. "
                        "--train_flag=--large_batch_rule=cowclip (repeat for more)")


def add_layout_arguments(parser: argparse.ArgumentParser) -> None:
    """`--cores_per_host`, `--ranks_per_host` and `--hosts_mode`: the emulated hosts' shape."""
    parser.add_argument("--cores_per_host", type=int, default=1,
                        help="vCPUs of each emulated host (blocks of the machine's vCPUs, hyperthreads of a core "
                        "together)")
    parser.add_argument("--ranks_per_host", type=int, default=1,
                        help="training processes per host, each pinned to cores_per_host / ranks_per_host of its "
                        "cores with as many TensorFlow threads; single runs on the cores of one rank")
    parser.add_argument("--hosts_mode", choices=HOSTS_MODES, default=HOSTS_EMULATED,
                        help="emulated: network namespaces (root); local: blocks of this machine's cores, ranks over "
                        "the loopback interface; auto: emulated where they can be made, else local")
    parser.add_argument("--host_memory", default="",
                        help="memory of each host (a memory cgroup; root needed), e.g. 6g, 6GiB, 6500m or bytes; "
                        "\"\" for no limit. A host killed for memory is reported with its peak and limit")


def check_train_flags(train_flags: Sequence[str]) -> None:
    """Raises ValueError, naming it, for a `--train_flag` that is not a whole `deepfm.train` flag."""
    for flag in train_flags:
        if not flag.startswith("--"):
            raise ValueError("--train_flag %r: give a whole deepfm.train flag, e.g. --train_flag=--exchange_fp16"
                             % flag)


def check_least(values) -> None:
    """Raises ValueError for a `(flag, value, least)` whose value is below its least; the message names it."""
    for flag, value, least in values:
        if value < least:
            raise ValueError("--%s must be >= %g, got %r" % (flag, least, value))


def check_hosts_mode(config: BenchmarkConfig) -> None:
    """Raises ValueError for variants the hosts cannot run: `ps` on local hosts."""
    if config.hosts_mode == HOSTS_LOCAL:
        ps = [v.name for v in config.variants if v.strategy == names.PS]
        if ps:
            raise ValueError("--hosts_mode local: %s name their hosts in TF_CONFIG and run only on emulated hosts"
                             % ", ".join(ps))


def check_machine(config: BenchmarkConfig, order: Sequence[int]) -> None:
    """Checks at start that every variant's layout fits this machine's vCPUs and that `taskset` is there.

    Raises:
      ValueError: a layout needs more vCPUs than there are, or pins processes without `taskset`.
    """
    for variant in config.variants:
        plan = layout.plan(variant, order, config.shared_cores)
        if any(cores for host in plan.processes for cores in host) and shutil.which(layout.TASKSET) is None:
            raise ValueError("variant %s pins its processes with %s, which is not on PATH (Debian package "
                             "util-linux)" % (variant.name, layout.TASKSET))


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument("--data_dir", default=DEFAULT_DATA_DIR)
    parser.add_argument("--rows", type=int, default=DEFAULT_ROWS, help="rows of a generated dataset")
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS)
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS, help="timed steps per distributed process")
    parser.add_argument("--warmup_steps", type=int, default=DEFAULT_WARMUP_STEPS)
    parser.add_argument("--link_gbps", type=float, default=DEFAULT_LINK_GBPS, help="egress limit per host; 0: none")
    parser.add_argument("--variants", default="", help="comma-separated variant names (default: all)")
    parser.add_argument("--results_dir", default=common.RESULTS_DIR)
    parser.add_argument("--name", default=NAME, help="the report's file name")
    parser.add_argument("--timeout_s", type=float, default=RUN_TIMEOUT_S)
    parser.add_argument("--shared_note", default="", help="what else ran on the machine, for the report")
    parser.add_argument("--trace_steps", type=int, default=0,
                        help="steps to trace in one extra run of every variant (0: no traced run)")
    parser.add_argument("--batch_size", type=int, default=BATCH, help="per-replica batch of every variant")
    add_layout_arguments(parser)
    add_train_flag_argument(parser)
    parser.add_argument("--report_only", help="write the report again from this results JSON (no runs; "
                        "--variants, --runs, --steps, --warmup_steps, --link_gbps, --trace_steps, --batch_size, "
                        "--cores_per_host, --ranks_per_host, --train_flag as it was run)")
    return parser.parse_args(argv)


def make_config(args: argparse.Namespace) -> BenchmarkConfig:
    """The `BenchmarkConfig` of the parsed arguments.

    Raises:
      ValueError: a bad argument; the message names it and its value.
    """
    variants = tuple(common.select_variants(args.variants, variants_lib.all_variants()))
    check_least((("runs", args.runs, 1), ("steps", args.steps, 2 * LOG_EVERY_STEPS),
                 ("warmup_steps", args.warmup_steps, 0), ("link_gbps", args.link_gbps, 0),
                 ("timeout_s", args.timeout_s, 1), ("trace_steps", args.trace_steps, 0),
                 ("batch_size", args.batch_size, 1), ("cores_per_host", args.cores_per_host, 1),
                 ("ranks_per_host", args.ranks_per_host, 1)))
    check_train_flags(args.train_flag)
    config = BenchmarkConfig(
        data_dir=os.path.abspath(args.data_dir), rows=args.rows, runs=args.runs, steps=args.steps,
        warmup_steps=args.warmup_steps, link_gbps=args.link_gbps, variants=variants,
        results_dir=args.results_dir, name=args.name, timeout_s=args.timeout_s, shared_note=args.shared_note,
        trace_steps=args.trace_steps, batch=args.batch_size, train_flags=tuple(args.train_flag),
        cores_per_host=args.cores_per_host, ranks_per_host=args.ranks_per_host, hosts_mode=args.hosts_mode,
        host_memory=args.host_memory)
    check_hosts_mode(config)
    return config


def exit_on_sigterm() -> None:
    """Makes a SIGTERM end this process as Ctrl-C does, through the cleanups of its hosts and processes."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def start_checks(config: BenchmarkConfig, topology: topology_lib.Topology) -> Optional[str]:
    """What stops the runs before they start (no root, no memory cgroups for a host limit, a bad layout), or None."""
    if config.hosts_mode == HOSTS_EMULATED:
        reason = hosts_lib.check_privileges()
        if reason:
            return reason
    if config.host_memory:
        try:
            memory_lib.find_controller()
        except memory_lib.MemoryLimitError as e:
            return str(e)
    try:
        check_machine(config, topology.order(topology_lib.allowed_cpus()))
    except ValueError as e:
        return str(e)
    return None


def run_measurement(config: BenchmarkConfig, topology: topology_lib.Topology):
    """Measures `config` on hosts of its mode; returns `(config with the mode used, results, failures, traced)`."""
    with run_hosts.open_hosts(config.hosts_mode, config.num_hosts, config.link_gbps, config.host_memory) as hosts:
        config = dataclasses.replace(config, hosts_mode=hosts.mode,
                                     shared_note=" ".join(n for n in (config.shared_note, hosts.note) if n))
        results, failures, traced = runner.measure(config, hosts, topology.order(topology_lib.allowed_cpus()))
    return config, results, failures, traced


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    try:
        config = make_config(args)
    except ValueError as e:
        print("error: %s" % e, file=sys.stderr)
        return 2
    if args.report_only:
        setup = report.load_setup(args.report_only)
        load = setup.get("load_average")
        config = dataclasses.replace(config, id_capacity=setup.get("id_capacity", 0),
                                     hosts_mode=setup.get("hosts_mode", config.hosts_mode))
        topology = topology_lib.Topology.from_dict(setup.get("topology"))
        results, failures, traced = report.load_results(args.report_only)
    else:
        topology = topology_lib.read()
        reason = start_checks(config, topology)
        if reason:
            print("error: %s" % reason, file=sys.stderr)
            return 2
        common.ensure_data(config.data_dir, config.rows, common.FEATURE_SIZE)
        exit_on_sigterm()
        config = id_capacity.with_id_capacity(config)
        load_before = os.getloadavg()[0]
        config, results, failures, traced = run_measurement(config, topology)
        load = (load_before, os.getloadavg()[0])
    body = report.report_body(config, results, failures, load, traced, topology)
    info = report.report_machine(args.report_only)
    info["cores used"] = "%d hosts, %s" % (config.num_hosts, config.layout_text())
    common.write_report(config.name, "Scale-out on emulated hosts", body, info,
                        report.raw_results(config, results, failures, traced, load, topology),
                        results_dir=config.results_dir)
    report.write_chart(config, results)
    print(body)
    return 1 if any(failures.values()) else 0
