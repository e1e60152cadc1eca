"""The command line of `python -m benchmarks.scale_out` (its options' checks, `run`, `main`)."""

import dataclasses
import os
import shutil
import signal
import sys
from typing import Optional, Sequence

from absl import app

from benchmarks import common, harness
from benchmarks import topology as topology_lib
from benchmarks.scale_out import hosts as run_hosts
from benchmarks.scale_out import id_capacity, layout, report, runner
from benchmarks.scale_out import variants as variants_lib
from benchmarks.scale_out.config import HOSTS_EMULATED, HOSTS_LOCAL, LOG_EVERY_STEPS, BenchmarkConfig
from benchmarks.scale_out.options import ScaleOutOptions
from jobs.local import hosts as hosts_lib
from jobs.local import memory as memory_lib
from strategies import strategy_names as names

PROGRAM = "benchmarks.scale_out"


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


def parse_args(argv: Sequence[str]) -> ScaleOutOptions:
    """The options of a command line (without the program's name).

    Raises:
      ValueError: a value the options refuse.
    """
    return harness.options(ScaleOutOptions, [PROGRAM] + list(argv))


def make_config(options: ScaleOutOptions) -> BenchmarkConfig:
    """The `BenchmarkConfig` of the options.

    Raises:
      ValueError: a bad option; the message names it and its value.
    """
    variants = tuple(common.select_variants(options.variants, variants_lib.all_variants()))
    check_least((("runs", options.rounds, 1), ("steps", options.steps, 2 * LOG_EVERY_STEPS),
                 ("warmup_steps", options.warmup_steps, 0), ("link_gbps", options.link_gbps, 0),
                 ("timeout_s", options.timeout_s, 1), ("trace_steps", options.trace_steps, 0),
                 ("batch_size", options.batch_size, 1), ("cores_per_host", options.cores_per_host, 1),
                 ("ranks_per_host", options.ranks_per_host, 1)))
    check_train_flags(options.train_flag)
    config = BenchmarkConfig(
        data_dir=os.path.abspath(options.data_dir), rows=options.rows, runs=options.rounds, steps=options.steps,
        warmup_steps=options.warmup_steps, link_gbps=options.link_gbps, variants=variants,
        results_dir=options.results_dir, name=options.name, timeout_s=options.timeout_s,
        shared_note=options.shared_note, trace_steps=options.trace_steps, batch=options.batch_size,
        train_flags=tuple(options.train_flag), cores_per_host=options.cores_per_host,
        ranks_per_host=options.ranks_per_host, hosts_mode=options.hosts_mode, host_memory=options.host_memory,
        warmup_rounds=options.warmup_rounds)
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


def run(options: ScaleOutOptions) -> int:
    """Measures (or, with `report_only`, reports again) and writes the report; returns the exit status.

    Raises:
      app.UsageError: a bad option, or what stops the runs before they start.
    """
    try:
        config = make_config(options)
    except ValueError as e:
        raise app.UsageError(str(e)) from e
    if options.report_only:
        setup = report.load_setup(options.report_only)
        load = setup.get("load_average")
        config = dataclasses.replace(config, id_capacity=setup.get("id_capacity", 0),
                                     hosts_mode=setup.get("hosts_mode", config.hosts_mode))
        topology = topology_lib.Topology.from_dict(setup.get("topology"))
        results, failures, traced = report.load_results(options.report_only)
    else:
        topology = topology_lib.read()
        reason = start_checks(config, topology)
        if reason:
            raise app.UsageError(reason)
        common.ensure_data(config.data_dir, config.rows, common.FEATURE_SIZE)
        exit_on_sigterm()
        config = id_capacity.with_id_capacity(config)
        load_before = os.getloadavg()[0]
        config, results, failures, traced = run_measurement(config, topology)
        load = (load_before, os.getloadavg()[0])
    body = report.report_body(config, results, failures, load, traced, topology)
    info = report.report_machine(options.report_only or None)
    info["cores used"] = "%d hosts, %s" % (config.num_hosts, config.layout_text())
    common.write_report(config.name, "Scale-out on emulated hosts", body, info,
                        report.raw_results(config, results, failures, traced, load, topology),
                        results_dir=config.results_dir)
    report.write_chart(config, results)
    print(body)
    return 1 if any(failures.values()) else 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """`run` of the process's command line, or of `argv` (without the program's name; see `harness.main_or_run`)."""
    return harness.main_or_run(ScaleOutOptions, run, PROGRAM, argv)
