"""One run of one variant on the hosts (`run_variant`), and rounds of runs (`run_rounds`, `measure`).

Every process of a run starts directly in its host (no SageMaker toolkit,
no ssh): each host's supervisor (`benchmarks.scale_out.supervisor`) starts
the host's processes, pinned as `layout.plan` says.

* `single`: one `deepfm.train --strategy single` in `algo-1` (a copy per
  host for `single_x2`), on the cores of one rank.
* `ps`: laid out as SageMaker does: on each host a parameter server
  (`algo-i:2223`) and a training task (`master` on `algo-1:2222`, `worker`
  on `algo-2:2222`), asynchronous, embeddings partitioned over the ps. The
  parameter servers are plain `tf.distribute.Server`s, as the toolkit
  starts them, stopped when their host's training task ends.
* `horovod` and `hybrid`: R ranks per host, Gloo, started without
  `horovodrun`: the supervisor of `algo-1` runs Horovod's own
  `RendezvousServer` with the slot plan `algo-1:R,algo-2:R,...` (what
  `horovodrun --gloo` does), and each rank gets the environment
  `horovodrun` would give it (rank, local rank, cross rank). A variant may
  instead start all its ranks on `algo-1` with Horovod's launcher as
  `deepfm.launch` starts it (`jobs.local.horovod_runner`, `--gloo` or
  `--mpi`: `Variant.launcher`); its bytes are then that host's loopback
  counters. Or, as SageMaker's toolkit does, every host runs sshd and
  `algo-1` runs `mpirun` with the toolkit's options, which starts the ranks
  of every host over ssh (`Variant.over_ssh`, emulated hosts only): the
  other hosts' supervisors run until `algo-1`'s says it is done.

Rounds are `benchmarks.harness.run`'s, interleaved: every variant once,
then again, each run a fresh set of processes; a failed run is recorded and
its variant runs again in the next round. With a deadline, a run that would
not end before it (by the time the same run took in an earlier round, or
for a run not yet made the longest run so far) is skipped, and every run's
timeout ends at the deadline.
"""

import dataclasses
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from benchmarks import harness
from benchmarks import topology as topology_lib
from benchmarks.scale_out import hosts as run_hosts
from benchmarks.scale_out import layout, supervisor
from benchmarks.scale_out import variants as variants_lib
from benchmarks.scale_out.config import HOSTS_LOCAL, LOG_EVERY_STEPS, BenchmarkConfig
from benchmarks.scale_out.measure import HOST_OUTPUT, MB, PROGRESS_DIR, TRACES, RunResult, measure_run
from benchmarks.scale_out.variants import ID_CAPACITY, Variant
from jobs.local import hosts as hosts_lib
from jobs.local import launcher as local_launcher
from strategies import strategy_names as names

NO_CHECKPOINT_STEPS = 10 ** 9
WORKER_PORT = 2222
PS_PORT = 2223
PORT_FILE = "rendezvous.port"
SSHD = "/usr/sbin/sshd"
SSH_PORT = 22
DONE_FILE = "done"
# `mpirun`'s options as SageMaker's toolkit gives them (the interface is the hosts'), then the variant's.
TOOLKIT_MPI_OPTIONS = ("--allow-run-as-root", "--tag-output", "-mca", "plm_rsh_no_tree_spawn", "1", "-bind-to",
                       "none", "-map-by", "slot", "-mca", "pml", "ob1", "-mca", "btl", "^openib", "-mca",
                       "orte_abort_on_non_zero_status", "1", "-mca", "btl_vader_single_copy_mechanism", "none")
# The environment `mpirun` passes to every rank (`-x`), where this process has it.
MPI_PASSED = ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH", "TF_CPP_MIN_LOG_LEVEL", "PYTHONUNBUFFERED")
# After the first host of a run exits successfully, the others get this long, then are stopped
# (a ps worker can wait for a parameter server of the chief's host that has already exited).
STRAGGLER_GRACE_S = 30
LOG_TAIL_CHARS = 1500
ERROR_CHARS = 3000
# The errors a run can end with; the others are bugs.
RUN_ERRORS = (RuntimeError, TimeoutError, ValueError, OSError)
# A measurement's detail that holds its `RunResult`.
RESULT = "result"
# The harness's line of a finished run (`describe_run` prints a fuller one).
RUN_LOGGED = re.compile(r"^round -?\d+ \S+ examples_per_sec ")


def package_root() -> str:
    """The directory holding the project's packages (every process's working directory)."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def base_env(variant: Variant) -> Dict[str, str]:
    """The environment of a run's processes: this one's, the variant's, the project on PYTHONPATH."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1", **dict(variant.env))
    env.pop("TF_CONFIG", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root(), os.environ.get("PYTHONPATH", "")) if p)
    return env


def variant_flags(variant: Variant, config: BenchmarkConfig) -> List[str]:
    """The flags `variant` adds to `deepfm.train`: the run's (`--train_flag`), then its own.

    Raises:
      ValueError: the variant needs the id capacity and none was measured.
    """
    if variant.uses_id_capacity and config.id_capacity < 1:
        raise ValueError("variant %s needs the measured id capacity (BenchmarkConfig.id_capacity)" % variant.name)
    return list(config.train_flags) + [flag.replace(ID_CAPACITY, str(config.id_capacity))
                                       for flag in variant.train_flags]


def core_order() -> List[int]:
    """The vCPUs this process may use, in topology order (`benchmarks.topology`)."""
    return topology_lib.read().order(topology_lib.allowed_cpus())


def core_plan(variant: Variant, config: BenchmarkConfig, order: Optional[Sequence[int]] = None) -> layout.CorePlan:
    """Where `variant`'s processes run (`layout.plan`) on `order` (default: this machine's, `core_order`)."""
    return layout.plan(variant, core_order() if order is None else order, config.shared_cores)


def train_argv(variant: Variant, config: BenchmarkConfig, work: str, index: int, traced: bool,
               plan: layout.CorePlan) -> List[str]:
    """`deepfm.train`'s command line for host `index`: the layout's threads, the run's flags, the variant's."""
    # Independent copies keep their own files (the first copy's metrics are the run's).
    suffix = "-%d" % index if variant.is_single and index else ""
    progress = "{task}-%d.jsonl" % index if variant.copies > 1 else "{task}.jsonl"
    return [sys.executable, "-m", "deepfm.train", "--strategy", variant.strategy,
            "--train_data", config.data_dir, "--model_dir", os.path.join(work, "model" + suffix),
            "--metrics_file", os.path.join(work, "metrics%s.json" % suffix), "--batch_size", str(config.batch),
            "--max_steps", str(config.max_steps(variant)), "--log_every_n_steps", str(LOG_EVERY_STEPS),
            "--progress_file", os.path.join(work, PROGRESS_DIR, progress),
            "--save_checkpoints_steps", str(NO_CHECKPOINT_STEPS)] + plan.thread_flags() + variant_flags(
                variant, config) + (["--trace_steps", str(config.trace_steps), "--trace_dir",
                                     os.path.join(work, TRACES)] if traced else [])


def _ps_cluster(hosts: Sequence[str]) -> Dict[str, List[str]]:
    """SageMaker's parameter-server layout: `master` and `worker` on 2222, a ps on every host on 2223."""
    return {"master": ["%s:%d" % (hosts[0], WORKER_PORT)],
            "worker": ["%s:%d" % (name, WORKER_PORT) for name in hosts[1:]],
            "ps": ["%s:%d" % (name, PS_PORT) for name in hosts]}


def host_processes(variant: Variant, config: BenchmarkConfig, work: str, index: int, traced: bool = False,
                   plan: Optional[layout.CorePlan] = None, local_hosts: bool = False) -> List[Dict]:
    """The processes of host `index` for one run of `variant`: name, argv, env, log, whether a service.

    Args:
      variant: the variant, at its layout.
      config: the run.
      work: the run's directory.
      index: the host.
      traced: its training processes trace `config.trace_steps` steps.
      plan: where its processes run (default: `core_plan` on this machine).
      local_hosts: the hosts are `hosts.LocalHosts` (ranks meet at 127.0.0.1 over the loopback interface).

    Raises:
      ValueError: `ps` on local hosts; a variant that needs the id capacity without one.
    """
    variant = variant.at_layout(config.cores_per_host, config.ranks_per_host)
    plan = plan or core_plan(variant, config)
    argv = train_argv(variant, config, work, index, traced, plan)
    env = base_env(variant)
    host_list = variants_lib.host_names(variant.num_hosts)
    host = host_list[index]

    def process(name, process_env, process_argv, service=False):
        return {"name": name, "argv": process_argv, "env": process_env, "service": service,
                "log": os.path.join(work, "%s.log" % name)}

    if variant.is_single:
        return [process("single", env, plan.pin(index, 0) + argv)]
    if variant.strategy == names.PS:
        if local_hosts:
            raise ValueError("variant %s: ps names its hosts in TF_CONFIG and runs only on emulated hosts "
                             "(--hosts_mode emulated)" % variant.name)
        cluster = _ps_cluster(host_list)
        trainer = ("master", 0) if index == 0 else ("worker", index - 1)
        return [process("%s_ps_%d" % (host, index), dict(env, TF_CONFIG=json.dumps(
                    {"cluster": cluster, "task": {"type": "ps", "index": index}})),
                    supervisor.ps_command(sys.executable), service=True),
                process("%s_%s_%d" % (host, trainer[0], trainer[1]), dict(env, TF_CONFIG=json.dumps(
                    {"cluster": cluster, "task": {"type": trainer[0], "index": trainer[1]}})),
                    plan.pin(index, 0) + argv)]
    per_host = variant.ranks_per_host
    if variant.over_ssh:
        if local_hosts:
            raise ValueError("variant %s: mpirun starts ranks over ssh in each host's sshd: it runs only on "
                             "emulated hosts (--hosts_mode emulated)" % variant.name)
        sshd = process("%s_sshd" % host, env, [SSHD, "-D", "-e"], service=True)
        if index:
            return [sshd]
        return [sshd, dict(process("%s_mpirun" % host, env, mpirun_argv(variant, env, argv)),
                           wait_for=["%s:%d" % (name, SSH_PORT) for name in host_list])]
    if variant.launcher != variants_lib.LAUNCH_DIRECT:
        horovodrun = local_launcher.horovod_runner() + list(variants_lib.HOROVODRUN_ARGS[variant.launcher]) + [
            "-np", str(per_host), "-H", "localhost:%d" % per_host]
        return [process("%s_horovodrun" % host, env, horovodrun + argv)]
    size = variant.processes
    rendezvous = "127.0.0.1" if local_hosts else host_list[0]
    interface = "lo" if local_hosts else hosts_lib.DEFAULT_INTERFACE
    processes = []
    for local_rank in range(per_host):
        rank = index * per_host + local_rank
        processes.append(process("%s_rank_%d" % (host, rank), dict(
            env, HOROVOD_GLOO_RENDEZVOUS_ADDR=rendezvous, HOROVOD_CONTROLLER="gloo",
            HOROVOD_CPU_OPERATIONS="gloo", HOROVOD_GLOO_IFACE=interface, HOROVOD_HOSTNAME=host,
            HOROVOD_RANK=str(rank), HOROVOD_SIZE=str(size), HOROVOD_LOCAL_RANK=str(local_rank),
            HOROVOD_LOCAL_SIZE=str(per_host), HOROVOD_CROSS_RANK=str(index),
            HOROVOD_CROSS_SIZE=str(variant.num_hosts)), plan.pin(index, local_rank) + argv))
    return processes


def over_ssh_reason(hosts_mode: str) -> Optional[str]:
    """Why ranks cannot start by `mpirun` over ssh here (`Variant.over_ssh`), or None."""
    if hosts_mode == HOSTS_LOCAL:
        return "hosts without namespaces (--hosts_mode local) share this machine's sshd"
    mpirun = local_launcher.MPIRUN
    missing = [tool for tool, found in ((SSHD, os.path.exists(SSHD)), (mpirun, shutil.which(mpirun))) if not found]
    if missing:
        return "%s not installed (Debian packages openssh-server, openmpi-bin)" % " and ".join(missing)
    return None


def mpirun_argv(variant: Variant, env: Dict[str, str], argv: Sequence[str]) -> List[str]:
    """`mpirun` on `algo-1` starting `argv` as `variant`'s ranks on every host, as SageMaker's toolkit does."""
    interface = hosts_lib.DEFAULT_INTERFACE
    slots = ",".join("%s:%d" % (name, variant.ranks_per_host) for name in variants_lib.host_names(variant.num_hosts))
    passed = [part for name in MPI_PASSED if name in env for part in ("-x", name)]
    return ([local_launcher.MPIRUN, "--host", slots, "-np", str(variant.processes),
             "-mca", "btl_tcp_if_include", interface, "-mca", "oob_tcp_if_include", interface]
            + list(TOOLKIT_MPI_OPTIONS) + list(variants_lib.SSH_MPI_ARGS[variant.launcher])
            + ["-x", "HOROVOD_CONTROLLER=mpi", "-x", "HOROVOD_CPU_OPERATIONS=mpi"] + passed + list(argv))


def run_variant(variant: Variant, config: BenchmarkConfig, hosts, traced: bool = False,
                order: Optional[Sequence[int]] = None, timeout_s: Optional[float] = None) -> RunResult:
    """Runs `variant` once, every host's processes in a fresh host, and measures it.

    Args:
      variant: the variant, at its layout.
      config: the run.
      hosts: `hosts.EmulatedHosts` or `hosts.LocalHosts`, at least as many as the variant's.
      traced: its training processes trace `config.trace_steps` steps.
      order: the vCPUs to lay it out on (default: this machine's, `core_order`).
      timeout_s: the longest it may take (default: `config.timeout_s`).

    Raises:
      RuntimeError: a host failed (the message holds the end of its logs).
      TimeoutError: the run took longer than its timeout.
      ValueError: the layout needs more cores than there are, or a variant the hosts cannot run.
    """
    variant = variant.at_layout(config.cores_per_host, config.ranks_per_host)
    plan = core_plan(variant, config, order)
    local_hosts = hosts.mode == HOSTS_LOCAL
    timeout_s = config.timeout_s if timeout_s is None else timeout_s
    with tempfile.TemporaryDirectory(prefix="bench-scale-out-") as work, \
            supervisor.MachineCpuSampler(supervisor.SAMPLE_SECONDS) as machine:
        os.makedirs(os.path.join(work, PROGRESS_DIR))
        launched = []
        try:
            host_list = variants_lib.host_names(variant.num_hosts)
            for index, name in enumerate(host_list):
                # Ranks that horovodrun starts on one host talk over its loopback interface.
                spread = variant.ranks_on_every_host
                spec = {"processes": host_processes(variant, config, work, index, traced, plan, local_hosts),
                        "interface": hosts.interface_of(index) if spread or local_hosts else "lo",
                        "output": os.path.join(work, HOST_OUTPUT % name), "cwd": package_root()}
                if variant.over_ssh:
                    hosts.install_ssh()
                    spec["done_file" if index == 0 else "until_file"] = os.path.join(work, DONE_FILE)
                    spec["sample_adopted"] = True
                if variant.rank_per_process and variant.launcher == variants_lib.LAUNCH_DIRECT:
                    spec["rendezvous"] = {"serve": index == 0, "port_file": os.path.join(work, PORT_FILE),
                                          "plan": ",".join("%s:%d" % (h, variant.ranks_per_host) for h in host_list)}
                spec_path = os.path.join(work, "host-%s.spec.json" % name)
                with open(spec_path, "w") as f:
                    json.dump(spec, f)
                launched.append(hosts.start(index, supervisor.command(sys.executable, spec_path), base_env(variant),
                                            plan.hosts[index], package_root(), work,
                                            os.path.join(work, "init-%s.log" % name)))
            stopped = _wait_for_hosts(launched, timeout_s)
            if stopped is None:
                raise TimeoutError("%s ran longer than %.0f s" % (variant.name, timeout_s))
            codes = [0 if index in stopped else proc.returncode for index, proc in enumerate(launched)]
            for index in stopped:
                _wait_for_file(os.path.join(work, HOST_OUTPUT % host_list[index]), STRAGGLER_GRACE_S)
            if any(codes):
                raise RuntimeError("%s: host exit codes %s%s\n%s" % (variant.name, codes, hosts.memory_report(),
                                                                     _log_tails(work)))
            result = measure_run(variant, config, work, machine.samples)
            result.stopped_hosts = [host_list[index] for index in stopped]
            return result
        finally:
            for proc in launched:
                hosts.kill(proc)


def _wait_for_hosts(launched: Sequence[subprocess.Popen], timeout_s: float) -> Optional[List[int]]:
    """Waits for every host; returns the indices of those stopped as stragglers, None on timeout.

    Once one host has exited successfully, the others get `STRAGGLER_GRACE_S`
    more seconds, then SIGTERM (their supervisor stops its processes and
    still writes what it measured).
    """
    deadline = time.monotonic() + timeout_s
    grace_end = None
    while time.monotonic() < deadline:
        codes = [proc.poll() for proc in launched]
        if all(code is not None for code in codes):
            return []
        if grace_end is None and any(code == 0 for code in codes):
            grace_end = time.monotonic() + STRAGGLER_GRACE_S
        if grace_end is not None and time.monotonic() > grace_end:
            stragglers = [index for index, code in enumerate(codes) if code is None]
            for index in stragglers:
                launched[index].terminate()
            if hosts_lib.wait_for_exit([launched[index] for index in stragglers], STRAGGLER_GRACE_S):
                return stragglers
            return None
        time.sleep(0.2)
    return None


def _wait_for_file(path: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.1)


def _log_tails(work: str, chars: int = LOG_TAIL_CHARS) -> str:
    tails = []
    for path in sorted(glob.glob(os.path.join(work, "*.log"))):
        with open(path, errors="replace") as f:
            tails.append("--- %s\n%s" % (os.path.basename(path), f.read()[-chars:]))
    return "\n".join(tails)


@dataclasses.dataclass(frozen=True)
class Job:
    """One entry of a round: a variant of a run, under a key of its own (its name, or a table's label)."""

    key: str
    config: BenchmarkConfig
    variant: Variant


@dataclasses.dataclass
class Rounds:
    """What `run_rounds` measured, by job key.

    Attributes:
      results: the timed runs.
      failures: what each failed run said.
      skipped: per key, the rounds whose run did not fit before the deadline.
      seconds: per key, the wall seconds of its last run.
    """

    results: Dict[str, List[RunResult]] = dataclasses.field(default_factory=dict)
    failures: Dict[str, List[str]] = dataclasses.field(default_factory=dict)
    skipped: Dict[str, List[int]] = dataclasses.field(default_factory=dict)
    seconds: Dict[str, float] = dataclasses.field(default_factory=dict)


def describe_run(run: int, key: str, result: RunResult, seconds: float) -> str:
    """One line of the console for a finished run."""
    return ("run %d %-30s %8.0f examples/sec  %.3f CPU-s/1k  %.2f MB/step  step %.1f ms  auc %s  other load %s "
            "cores  (%.0f s)" % (run, key, result.examples_per_sec, result.cpu_seconds_per_1k,
                                 result.tx_bytes_per_step / MB, result.step_ms,
                                 "n/a" if result.auc is None else "%.4f" % result.auc,
                                 "n/a" if result.other_cores is None else "%.2f" % result.other_cores, seconds))


class JobVariant(harness.Variant):
    """A job as the harness measures it: each round one run (`run_one`), its timeout ending at the deadline."""

    def __init__(self, job: Job, hosts, order: Sequence[int], run_one: Callable[..., RunResult],
                 deadline: Optional[float]):
        self.name = job.key
        self.job = job
        self.hosts = hosts
        self.order = order
        self.run_one = run_one
        self.deadline = deadline

    def measure(self, round_index: int) -> harness.Measurement:
        """One run of the job; its `RunResult` is the details' `result`."""
        timeout_s = self.job.config.timeout_s
        if self.deadline is not None:
            timeout_s = min(timeout_s, self.deadline - time.monotonic())
        started = time.monotonic()
        result = self.run_one(self.job.variant, self.job.config, self.hosts, order=self.order, timeout_s=timeout_s)
        result.round = round_index
        print(describe_run(round_index, self.name, result, time.monotonic() - started), file=sys.stderr, flush=True)
        # The processes run in the hosts' namespaces, sampled for CPU and bytes, not memory.
        return harness.Measurement(
            metrics={"examples_per_sec": result.examples_per_sec, "cpu_seconds_per_1k": result.cpu_seconds_per_1k,
                     "step_ms": result.step_ms},
            peak_rss_mb=None, details={RESULT: result})


def rounds_of(results: harness.Results) -> Rounds:
    """The harness's results as `Rounds`, by job key."""
    return Rounds({key: [details[RESULT] for details in results.details[key]] for key in results.names},
                  {key: [message[-ERROR_CHARS:] for _, message in results.failed_rounds[key]]
                   for key in results.names},
                  {key: list(results.skipped[key]) for key in results.names}, dict(results.seconds))


def run_rounds(jobs: Sequence[Job], hosts, runs: int, order: Optional[Sequence[int]] = None,
               deadline: Optional[float] = None, on_run: Optional[Callable[[Rounds], None]] = None,
               run_one: Optional[Callable[..., RunResult]] = None, warmup_rounds: int = 0) -> Rounds:
    """Runs every job `runs` times, interleaved (round by round), on `hosts`, on the harness.

    Args:
      jobs: the jobs of a round, in order.
      hosts: `hosts.EmulatedHosts` or `hosts.LocalHosts`.
      runs: rounds.
      order: the vCPUs to lay the jobs out on (default: this machine's, `core_order`).
      deadline: a `time.monotonic()` time no run may end after (None: none).
      on_run: called with what was measured so far after every run (to write results as they come).
      run_one: how one job runs (`run_variant`'s arguments; default: `run_variant`).
      warmup_rounds: rounds run first and left out of the results.
    """
    order = core_order() if order is None else list(order)
    variants = [JobVariant(job, hosts, order, run_one or run_variant, deadline) for job in jobs]
    results = harness.run(
        variants, runs, warmup_rounds, deadline_s=None if deadline is None else deadline - time.monotonic(),
        fit_deadline=deadline is not None, retry_failed=True,
        log=lambda line: print(line, file=sys.stderr, flush=True) if RUN_LOGGED.search(line) is None else None,
        after_measurement=None if on_run is None else lambda so_far: on_run(rounds_of(so_far)))
    return rounds_of(results)


def measure(config: BenchmarkConfig, hosts=None, order: Optional[Sequence[int]] = None
            ) -> Tuple[Dict[str, List[RunResult]], Dict[str, List[str]], Dict[str, Dict]]:
    """Runs every variant of `config` `config.runs` times, interleaved, then the traced runs.

    Args:
      config: the run.
      hosts: the hosts to run on (default: `config.num_hosts` of `config.hosts_mode`, made and removed here).
      order: the vCPUs to lay the variants out on (default: this machine's).

    Returns:
      (the timed runs by variant, failures by variant, the traced run's
      breakdowns by variant and process: empty without `config.trace_steps`).
    """
    if hosts is None:
        with run_hosts.open_hosts(config.hosts_mode, config.num_hosts, config.link_gbps, config.host_memory) as made:
            return measure(config, made, order)
    order = core_order() if order is None else list(order)
    rounds = run_rounds([Job(v.name, config, v) for v in config.variants], hosts, config.runs, order,
                        warmup_rounds=config.warmup_rounds)
    traced: Dict[str, Dict] = {}
    if config.trace_steps:
        for variant in config.variants:
            try:
                traced[variant.name] = run_variant(variant, config, hosts, traced=True, order=order).traces
            except RUN_ERRORS as e:
                rounds.failures[variant.name].append("traced run: " + str(e)[-ERROR_CHARS:])
                print("traced %-30s FAILED: %s" % (variant.name, str(e)[-ERROR_CHARS:]), file=sys.stderr)
    return rounds.results, rounds.failures, traced

