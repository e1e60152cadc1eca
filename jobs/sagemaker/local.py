"""A SageMaker training job on this machine, run by SageMaker's own training toolkit.

`run(config)` does what SageMaker does for a TensorFlow 2.14 training job,
without Docker or an AWS account:

* one emulated host per instance (`jobs.local.hosts`: `algo-1` .. `algo-N`, each a
  network namespace with its own address and name resolution, its own PID,
  mount and UTS namespaces, optionally pinned to its own cores);
* each host's `/opt/ml` is `<output_dir>/<host>/`, bind-mounted at
  `/opt/ml`, holding the source tarball (`source/`, where S3 would hold
  it),  `input/config/{hyperparameters,resourceconfig,
  inputdataconfig,checkpointconfig}.json` as SageMaker writes them and
  `input/data/<channel>` (File mode: the channel's files, or with
  `ShardedByS3Key` this host's part of them; Pipe mode: FIFOs fed by
  `input_pipeline.pipe_feeder`, one reader per FIFO as SageMaker has it;
  each channel in the job's input mode or its own);
* `/opt/ml/checkpoints` is one directory, `<output_dir>/checkpoints`,
  shared by every host, as the job's checkpoint S3 prefix is; a restarted
  job (`restart=True`) resumes from it;
* each host runs the container's entry command, the toolkit's `train`, with
  `SAGEMAKER_TRAINING_MODULE` set as in the SageMaker TensorFlow container:
  the toolkit, not this module, builds `TF_CONFIG` and starts the parameter
  servers, or starts sshd and runs `mpirun` over ssh from `algo-1`;
* each host has a private `/tmp` (its `HOME` is `/tmp/home`), and private `/etc/ssh`
  (an ssh server and client set-up made for the job: a key pair, no host
  key checking), so that nothing of the machine's own ssh set-up is used
  or changed.

With `host_memory` (`--host_memory 6g`), each host has that much memory,
as an instance has: a memory cgroup of its own (`jobs.local.memory`; root
needed, refused at start otherwise; default: no limit, since a local run
has no instance type).

The job's exit code is 0 when every host's toolkit exits with 0; otherwise
every host is stopped and `JobFailedError` names the first host that
failed and the end of its log (`<output_dir>/logs/<host>.log`); when a
host's cgroup counted an OOM kill (that host's, or under mpirun another
host's, whose rank's death failed `algo-1`), it says which host was killed
for memory, its peak and its limit. Whatever
the end, the metric definitions a submitted job carries
(`jobs.sagemaker.metrics`) are applied to each host's log, as SageMaker
applies them, and the series found are written to
`<output_dir>/metric_series.json` (`{host: {metric: [values]}}`).

`run_on_hosts` (start the hosts, supervise them, stop and remove them
whatever happens) and the file helpers are shared with the Processing jobs
of `jobs.sagemaker.processing`.
"""

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import sys
from typing import Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from cli import config_flags
from jobs import source as source_lib
from jobs import spec as spec_lib
from jobs.local import hosts as hosts_lib
from jobs.local import memory as memory_lib
from jobs.local import processes, ssh
from jobs.sagemaker import container as container_lib
from jobs.sagemaker import metrics as sagemaker_metrics

BASE_DIR = "/opt/ml"
LOGS = "logs"
METRIC_SERIES = "metric_series.json"
CHECKPOINTS = "checkpoints"
SOURCE = "source"
PRIVATE = ".hosts"
TRAIN_COMMAND = "train"
# Each host's HOME, inside its private /tmp: the toolkit's ssh checks
# (paramiko) find the job's key in ~/.ssh there.
HOME_IN_TMP = "home"
TASKSET = "taskset"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PASSED_VARIABLES = ("TF_CPP_MIN_LOG_LEVEL", "LANG", "LC_ALL", "TZ")
EXIT_FAILURE = 1
DEFAULT_STOP_GRACE_S = 30.0
MEMORY_HINT = ("raise --host_memory, or use more instances or a distribution that shards the embedding tables "
               "(python -m deepfm.advise --data DIR --hosts N --cores_per_host C predicts each)")
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class JobFailedError(RuntimeError):
    """A host of the job failed; every host was stopped.

    Attributes:
      host: the host that failed first.
      returncode: its entry command's exit code (the toolkit's, for training).
      log_path: its log.
      memory: the host killed for memory that explains the failure, or None.
    """

    def __init__(self, host: str, returncode: int, log_path: str, detail: str,
                 memory: Optional[memory_lib.MemoryEvent] = None):
        self.host = host
        self.returncode = returncode
        self.log_path = log_path
        self.memory = memory
        super().__init__("host %s failed (%s)" % (host, detail))


@dataclasses.dataclass(frozen=True)
class LocalConfig:
    """How to run a `JobSpec` here.

    Attributes:
      spec: the job.
      output_dir: where everything goes (see the module docstring).
      cpus_per_host: cores each host is pinned to; 0 pins nothing.
      link_gbps: each host's egress bandwidth limit; 0 for none.
      restart: run again in an `output_dir` that holds an earlier run of
        this job: the hosts' directories are replaced (as new containers
        would be) and the checkpoints are kept.
      timeout_s: stop every host and fail after this many seconds; 0: none.
      pipe_epochs: Pipe mode: epochs the feeders stream per channel
        (default: the `num_epochs` hyperparameter, else 1).
      stop_grace_s: when the job is stopped (SIGTERM, Ctrl-C, a failed
        host), how long every host's processes have after SIGTERM before
        SIGKILL (SageMaker gives 120 s).
      host_memory: each host's memory limit (`jobs.local.memory.parse_size`:
        `6g`); "" for none.
    """

    spec: spec_lib.JobSpec
    output_dir: str = dataclasses.field(metadata=config_flags.metadata(
        "local: where hosts' /opt/ml, checkpoints and logs go."))
    cpus_per_host: int = config_flags.field(0, "local: cores each host is pinned to (0: not pinned).")
    link_gbps: float = config_flags.field(0.0, "local: each host's egress bandwidth in Gbit/s (0: unlimited).")
    restart: bool = config_flags.field(False, "local: run again in --output_dir, resuming from its checkpoints.")
    timeout_s: float = config_flags.field(0.0, "local: stop every host and fail after this many seconds (0: none).")
    pipe_epochs: Optional[int] = None
    stop_grace_s: float = DEFAULT_STOP_GRACE_S
    host_memory: str = config_flags.field(
        "", "local: each host's memory (a memory cgroup; root needed), e.g. 6g, 6GiB, 6500m or bytes; \"\" for no "
        "limit. A host killed for memory is reported with its peak and limit.")

    def __post_init__(self):
        if self.timeout_s < 0:
            raise ValueError("--timeout_s must be >= 0, got %r" % self.timeout_s)
        if self.host_memory:
            memory_lib.parse_size(self.host_memory)
        for channel in self.spec.channels:
            if not os.path.exists(channel.uri):
                raise ValueError("--channel %s=%s: no such file or directory" % (channel.name, channel.uri))
        for channel in self.spec.channels_in(spec_lib.PIPE_MODE):
            kinds = sorted({os.path.splitext(name)[1] or name for name in channel_files(channel.uri)})
            if len(kinds) > 1:
                raise ValueError(
                    "--channel %s=%s: Pipe mode streams every file of a channel into its FIFO, as SageMaker does, "
                    "and this one holds %s files: give a Pipe-mode channel the records of one format only (e.g. "
                    "a folder of the .tfrecord files), and the dataset's metadata.json through a File-mode "
                    "channel (e.g. --channel_input_mode validation=File)"
                    % (channel.name, channel.uri, ", ".join(kinds)))

    @property
    def epochs_to_stream(self) -> int:
        if self.pipe_epochs is not None:
            return self.pipe_epochs
        epochs = self.spec.hyperparameters.get("num_epochs", 1)
        return int(epochs) if isinstance(epochs, (int, float, str)) and str(epochs).isdigit() else 1


def channel_files(uri: str) -> List[str]:
    """The files of a channel, relative to it, sorted (as S3 lists keys); a file is its own channel."""
    if os.path.isfile(uri):
        return [os.path.basename(uri)]
    found = []
    for directory, subdirs, names in os.walk(uri):
        subdirs.sort()
        found += [os.path.relpath(os.path.join(directory, name), uri) for name in sorted(names)]
    return sorted(found)


def host_share(files: Sequence[str], distribution: str, host_index: int, num_hosts: int) -> List[str]:
    """The files a host receives: all of them, or with `ShardedByS3Key` every `num_hosts`-th.

    Raises:
      ValueError: a sharded channel with fewer files than hosts (a host would
        get none).
    """
    if distribution != spec_lib.SHARDED_BY_S3_KEY:
        return list(files)
    if len(files) < num_hosts:
        raise ValueError("a ShardedByS3Key channel has %d file(s) for %d hosts: every host needs at least one"
                         % (len(files), num_hosts))
    return list(files[host_index::num_hosts])


def place_file(source: str, target: str) -> None:
    """A hard link where the file system allows one, else a copy (what a File-mode download gives)."""
    os.makedirs(os.path.dirname(target), exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def write_json(path: str, value) -> None:
    """Writes `value` as indented JSON to `path`, creating its directory."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(value, f, indent=1)


def container_environment(python: str, region: str, home: str) -> Dict[str, str]:
    """The environment every container's entry command starts with: this machine's Python as the image's.

    Args:
      python: the interpreter standing in for the image's (its directory
        leads `PATH`).
      region: the job's AWS region.
      home: the `HOME` directory.
    """
    env = {name: os.environ[name] for name in PASSED_VARIABLES if name in os.environ}
    env.update({
        "PATH": os.pathsep.join([os.path.dirname(python), SYSTEM_PATH]),
        "HOME": home,
        "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "AWS_REGION": region,
    })
    return env


class LocalJob:
    """The directories, hosts and processes of one local run; see `run`."""

    def __init__(self, config: LocalConfig, python: str = sys.executable):
        self.config = config
        self.spec = config.spec
        self.python = python
        self.output_dir = os.path.abspath(config.output_dir)
        self.log_dir = os.path.join(self.output_dir, LOGS)
        self.checkpoint_dir = os.path.join(self.output_dir, CHECKPOINTS)
        self.private_dir = os.path.join(self.output_dir, PRIVATE)
        self.use_namespaces = hosts_lib.check_privileges() is None
        if self.use_namespaces:
            hosts_lib.check_interpreter(python)
        if not self.use_namespaces and self.spec.instance_count > 1:
            raise hosts_lib.HostSetupError(
                "--instance_count %d: %s" % (self.spec.instance_count, hosts_lib.check_privileges()))
        if not self.use_namespaces and self.spec.distribution == spec_lib.DISTRIBUTION_MPI:
            raise hosts_lib.HostSetupError(
                "--distribution mpi: the toolkit's hostname shim reads /opt/ml itself, so even one host "
                "needs its own mount namespace: %s" % hosts_lib.check_privileges())

    def host_dir(self, host: str) -> str:
        """What `host` sees as `/opt/ml` (also what SageMaker would upload from it)."""
        return os.path.join(self.output_dir, host)

    def prepare(self) -> None:
        """Creates the output layout, refusing to overwrite an earlier run unless restarting.

        Raises:
          FileExistsError: an earlier run is there and `restart` is not set.
        """
        earlier = [host for host in self.spec.hosts if os.path.exists(self.host_dir(host))]
        if earlier and not self.config.restart:
            raise FileExistsError(
                "--output_dir %s already holds a run of a job (%s): pass --restart to run it again from its "
                "checkpoints, or use a new --output_dir" % (self.output_dir, ", ".join(earlier)))
        for host in self.spec.hosts:
            shutil.rmtree(self.host_dir(host), ignore_errors=True)
        for directory in (self.private_dir, self.log_dir):
            shutil.rmtree(directory, ignore_errors=True)
            os.makedirs(directory)
        os.makedirs(self.checkpoint_dir, exist_ok=True)
        self._make_keys()
        for index, host in enumerate(self.spec.hosts):
            root = self.host_dir(host)
            # Where S3 would hold the source tarball: a path each host can read.
            tarball = os.path.join(root, SOURCE, source_lib.SOURCE_TARBALL)
            os.makedirs(os.path.dirname(tarball))
            source_lib.write_source_tarball(tarball, source_dir=self.spec.source_dir)
            seen_as = tarball if not self.use_namespaces else os.path.join(
                BASE_DIR, SOURCE, source_lib.SOURCE_TARBALL)
            hyperparameters = container_lib.encoded_hyperparameters(
                self.spec, seen_as, container_lib.model_dir_for(self.spec))
            config_dir = os.path.join(root, "input", "config")
            write_json(os.path.join(config_dir, "hyperparameters.json"), hyperparameters)
            write_json(os.path.join(config_dir, "resourceconfig.json"),
                       container_lib.resource_config(self.spec, host))
            write_json(os.path.join(config_dir, "inputdataconfig.json"), container_lib.input_data_config(self.spec))
            if self.spec.checkpoints:
                write_json(os.path.join(config_dir, "checkpointconfig.json"),
                           container_lib.checkpoint_config("file://" + self.checkpoint_dir))
            for name in ("model", os.path.join("output", "data"), "code", CHECKPOINTS):
                os.makedirs(os.path.join(root, name), exist_ok=True)
            os.makedirs(os.path.join(root, "input", "data"), exist_ok=True)
            for channel in self.spec.channels_in(spec_lib.FILE_MODE):
                target = os.path.join(root, "input", "data", channel.name)
                os.makedirs(target, exist_ok=True)
                for name in self.host_files(channel, index):
                    source = channel.uri if os.path.isfile(channel.uri) else os.path.join(channel.uri, name)
                    place_file(source, os.path.join(target, name))
            home_ssh = os.path.join(self.private_dir, host, "tmp", HOME_IN_TMP, ".ssh")
            shutil.copytree(os.path.join(self.private_dir, ssh.SSH), home_ssh)

    def host_files(self, channel: spec_lib.Channel, host_index: int) -> List[str]:
        """The files of `channel` that host `host_index` receives, relative to the channel."""
        return host_share(channel_files(channel.uri), channel.distribution, host_index, self.spec.instance_count)

    def _make_keys(self) -> None:
        ssh.write_setup(os.path.join(self.private_dir, ssh.SSH), self.spec.job_name,
                        authorized_keys=os.path.join(ssh.ETC_SSH, "authorized_keys"),
                        identity=os.path.join(ssh.ETC_SSH, ssh.KEY_NAME))

    def environment(self, host: str) -> Dict[str, str]:
        """The environment the container's entry command starts with."""
        home = os.path.join("/tmp", HOME_IN_TMP) if self.use_namespaces else os.path.join(
            self.private_dir, host, "tmp", HOME_IN_TMP)
        env = container_environment(self.python, self.spec.region, home)
        env["SAGEMAKER_TRAINING_MODULE"] = container_lib.TRAINING_MODULE
        if not self.use_namespaces:
            env["SAGEMAKER_BASE_DIR"] = self.host_dir(host)
        return env

    def entry_command(self) -> List[str]:
        """The container's entry command: the toolkit's `train`."""
        train = os.path.join(os.path.dirname(self.python), TRAIN_COMMAND)
        if not os.path.exists(train):
            raise FileNotFoundError("the SageMaker training toolkit's %r command is not beside %s: install "
                                    "sagemaker-training" % (TRAIN_COMMAND, self.python))
        return [self.python, train]

    def init_spec(self, host: hosts_lib.Host) -> hosts_lib.InitSpec:
        """What `jobs.local.host_init` sets up in `host` before the entry command."""
        private = os.path.join(self.private_dir, host.name)
        binds = ((self.host_dir(host.name), BASE_DIR),
                 (self.checkpoint_dir, os.path.join(BASE_DIR, CHECKPOINTS)),
                 (os.path.join(private, "tmp"), "/tmp"))
        return hosts_lib.InitSpec(hostname=host.name, argv=tuple(self.entry_command()),
                                  env=self.environment(host.name), binds=binds, cpus=host.cpus, cwd="/")

    def write_etc(self, network: hosts_lib.HostNetwork, host: hosts_lib.Host) -> None:
        """Gives `host` the job's ssh set-up as its `/etc/ssh`."""
        ssh.install_etc_ssh(os.path.join(self.private_dir, ssh.SSH), network, host)

    def feeders(self):
        """Pipe mode: one feeder per host, streaming that host's share of every Pipe-mode channel."""
        from input_pipeline import pipe_feeder
        started = []
        for index, host in enumerate(self.spec.hosts):
            channels = {}
            for channel in self.spec.channels_in(spec_lib.PIPE_MODE):
                base = channel.uri if os.path.isdir(channel.uri) else os.path.dirname(channel.uri)
                channels[channel.name] = [os.path.join(base, name) for name in self.host_files(channel, index)]
            started.append(pipe_feeder.PipeFeeder(self.host_dir(host), channels,
                                                  epochs=self.config.epochs_to_stream).start())
        return started


def run(config: LocalConfig, python: str = sys.executable) -> None:
    """Runs the job to its end; see the module docstring.

    Raises:
      hosts_lib.HostSetupError: emulated hosts cannot be created here.
      FileExistsError: `output_dir` holds an earlier run and `restart` is
        not set.
      ValueError: a bad channel (e.g. fewer files than hosts to shard over).
      JobFailedError: a host failed (every host was stopped).
      TimeoutError: the job ran past `timeout_s` (every host was stopped).
      processes.Terminated: SIGTERM or SIGHUP (every host was stopped).
      memory_lib.MemoryLimitError: `host_memory` where memory cgroups cannot
        be made (before anything is prepared).
    """
    if config.host_memory:
        memory_lib.find_controller()
    job = LocalJob(config, python)
    cpus = hosts_lib.assign_cpus(config.spec.instance_count, config.cpus_per_host)
    job.prepare()
    try:
        run_on_hosts(job, config.spec.hosts, cpus, link_gbps=config.link_gbps, timeout_s=config.timeout_s,
                     stop_grace_s=config.stop_grace_s, python=python, machine_dirs=(ssh.SSHD_PRIVSEP_DIR, BASE_DIR),
                     host_memory=config.host_memory,
                     start_services=job.feeders if config.spec.channels_in(spec_lib.PIPE_MODE) else None)
    finally:
        write_metric_series(job.output_dir, config.spec.hosts)


def write_metric_series(output_dir: str, host_names: Sequence[str]) -> str:
    """Applies the jobs' metric definitions to each host's log; writes `<output_dir>/metric_series.json`.

    Returns:
      Its path.
    """
    found = {}
    for host in host_names:
        log = os.path.join(output_dir, LOGS, host + ".log")
        if os.path.exists(log):
            with open(log, errors="replace") as f:
                found[host] = sagemaker_metrics.series(f)
    path = os.path.join(output_dir, METRIC_SERIES)
    write_json(path, found)
    return path


def run_on_hosts(job, host_names: Sequence[str], cpus: Sequence[tuple], *, link_gbps: float, timeout_s: float,
                 stop_grace_s: float, python: str, machine_dirs: Sequence[str] = (BASE_DIR,),
                 start_services: Optional[Callable[[], list]] = None, host_memory: str = "") -> None:
    """Runs a prepared job's entry command on every host to the end; shared by training and processing jobs.

    `job` provides `use_namespaces`, `log_dir`, `private_dir`,
    `init_spec(host)` (the host's init: binds, environment, entry command),
    `write_etc(network, host)` (its private `/etc` files),
    `entry_command()` and `environment(name)` (without namespaces). Every
    host and every service is stopped and every namespace removed on the way
    out, whatever the way.

    Args:
      job: the prepared job (e.g. `LocalJob`).
      host_names: the hosts, `algo-1` first.
      cpus: per host, the cores to pin it to (see `hosts_lib.assign_cpus`).
      link_gbps: each host's egress bandwidth limit; 0 for none.
      timeout_s: stop every host and fail after this many seconds; 0: none.
      stop_grace_s: how long every host has between SIGTERM and SIGKILL.
      python: the interpreter of the hosts' inits.
      machine_dirs: directories of this machine the hosts need as mount
        points (created when namespaces are used).
      start_services: started once the hosts' network is up and before the
        hosts; returns objects with `stop()`, called at the end.
      host_memory: each host's memory limit ("": none); see `emulated_hosts`.

    Raises:
      As `run`.
    """
    with emulated_hosts(job.log_dir, host_names, cpus, use_namespaces=job.use_namespaces, link_gbps=link_gbps,
                        stop_grace_s=stop_grace_s, machine_dirs=machine_dirs,
                        start_services=start_services, host_memory=host_memory) as (group, network):
        for index, name in enumerate(host_names):
            if network is not None:
                host = network.host(name)
                job.write_etc(network, host)
                spec_path = job.init_spec(host).write(os.path.join(job.private_dir, name, "init.json"))
                group.start(name, network.command(host, spec_path, python), host=name)
            else:
                pin = [TASKSET, "-c", ",".join(map(str, cpus[index]))] if cpus[index] else []
                group.start(name, pin + job.entry_command(), env=job.environment(name), host=name)
        print("started %s; logs in %s" % (", ".join(host_names), job.log_dir), flush=True)
        try:
            group.wait(timeout=timeout_s or None)
        except processes.TaskFailedError as e:
            raise JobFailedError(e.task, e.returncode, e.log_path, str(e), memory=e.memory) from e


@contextlib.contextmanager
def emulated_hosts(log_dir: str, host_names: Sequence[str], cpus: Optional[Sequence[tuple]] = None, *,
                   use_namespaces: bool = True, link_gbps: float = 0.0, stop_grace_s: float = DEFAULT_STOP_GRACE_S,
                   machine_dirs: Sequence[str] = (BASE_DIR,), aliases: Optional[Mapping[str, Sequence[str]]] = None,
                   start_services: Optional[Callable[[], list]] = None, host_memory: str = "",
                   memory_hint: str = MEMORY_HINT
                   ) -> Iterator[Tuple[processes.ProcessGroup, Optional[hosts_lib.HostNetwork]]]:
    """The emulated hosts of a job and the group supervising what runs in them, removed on the way out.

    Yields `(group, network)`: a `ProcessGroup` logging to `log_dir` and
    (with namespaces) the `HostNetwork` of `host_names`. Whatever way the
    block is left, every task and service is stopped (each host's processes
    get `stop_grace_s` after SIGTERM) and every namespace removed; SIGTERM
    and SIGHUP raise `processes.Terminated` in the block, and a second
    signal does not cut the hosts' grace period short.

    Args:
      log_dir: where each task's log goes.
      host_names: the hosts.
      cpus: per host, the cores to pin it to (default: none).
      use_namespaces: False runs without a network (one host, no root).
      link_gbps: each host's egress bandwidth limit; 0 for none.
      stop_grace_s: how long every host has between SIGTERM and SIGKILL.
      machine_dirs: directories of this machine the hosts need as mount
        points (created when namespaces are used).
      aliases: host name -> other names every host resolves it by.
      start_services: started once the hosts' network is up; returns
        objects with `stop()`, called at the end.
      host_memory: each host's memory limit (`jobs.local.memory.parse_size`);
        "" for none. A task started with `host=<its host>` joins that host's
        memory cgroup (made without a limit where cgroups can be made, for
        the host's peak and OOM kills); the cgroups are removed at the end.
      memory_hint: what a report of a host killed for memory says to change.

    Raises:
      memory_lib.MemoryLimitError: `host_memory` where memory cgroups cannot
        be made.
    """
    services = []
    network = None
    try:
        with processes.signals_raise(), processes.ProcessGroup(
                log_dir, stop_grace_seconds=stop_grace_s, terminate_descendants=not use_namespaces,
                memories=memory_lib.HostMemories(host_memory, hint=memory_hint)) as group:
            if use_namespaces:
                for directory in machine_dirs:
                    os.makedirs(directory, exist_ok=True)
                network = hosts_lib.HostNetwork(host_names, cpus=cpus, link=hosts_lib.LinkModel(link_gbps),
                                                aliases=aliases)
            if start_services is not None:
                services = start_services()
            try:
                yield group, network
            except processes.Terminated:
                # The hosts now get their grace period to stop (leaving the
                # group stops them): a second signal must not cut it short.
                for signum in STOP_SIGNALS:
                    signal.signal(signum, signal.SIG_IGN)
                raise
    finally:
        for service in services:
            service.stop()
        if network is not None:
            network.close()


def summary(config: LocalConfig) -> str:
    """What each host left behind: its status, model files, `metrics.json` and the metric series of its log."""
    lines = []
    series_path = os.path.join(os.path.abspath(config.output_dir), METRIC_SERIES)
    series = {}
    if os.path.exists(series_path):
        with open(series_path) as f:
            series = json.load(f)
    for host in config.spec.hosts:
        root = os.path.join(os.path.abspath(config.output_dir), host)
        model = sorted(os.path.relpath(os.path.join(d, n), root)
                       for d, _, names in os.walk(os.path.join(root, "model")) for n in names)
        metrics_path = os.path.join(root, "output", "data", "metrics.json")
        status = "success" if os.path.exists(os.path.join(root, "output", "success")) else (
            "failure" if os.path.exists(os.path.join(root, "output", "failure")) else "no status")
        line = "%s: %s, %d model file(s)" % (host, status, len(model))
        if os.path.exists(metrics_path):
            with open(metrics_path) as f:
                metrics = json.load(f)
            auc = metrics.get("auc")
            line += ", metrics.json: AUC %s at global step %s%s" % (
                "n/a" if auc is None else "%.4f" % auc, metrics.get("global_step"),
                " (interrupted)" if metrics.get("interrupted") else "")
        if series.get(host):
            line += "; metric series in its log: %s" % ", ".join(
                "%s x%d (last %g)" % (name, len(values), values[-1]) for name, values in series[host].items())
        lines.append(line)
    return "\n".join(lines)
