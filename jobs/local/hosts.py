"""Emulated hosts on one Linux machine: network namespaces with their own names.

A `HostNetwork` creates `N` hosts, each a network namespace with one
interface (`eth0` by default, the name SageMaker's `resourceconfig.json`
gives) on a private subnet, joined by a bridge that lives in a namespace of
its own, so that the machine's own network is never touched. Each host
resolves every host's name through its own `/etc/netns/<namespace>/hosts`
(which `ip netns exec` mounts over `/etc/hosts`), and gets private
`/etc/environment` and `/etc/ssh` the same way. An optional link model
limits each host's egress bandwidth with a token-bucket filter.

Processes run in a host through `HostNetwork.command`: `ip netns exec` into
its network namespace, then `unshare` into new PID, mount and UTS
namespaces, where `jobs.local.host_init` becomes the host's init: it sets the
host name, bind-mounts the host's directories (its `/opt/ml`, a private
`/tmp`), pins itself to the host's cores and runs the host's command.
Killing that init kills everything in the host.

Everything is removed on `close()` (and by the context manager, on error or
Ctrl-C): processes in the namespaces, the namespaces, their `/etc/netns`
directories. Namespaces left behind by a process that was killed outright
carry its pid in their name and are removed by the next `HostNetwork`.

Namespaces need root (CAP_SYS_ADMIN); `check_privileges` says what is
missing. A host sees its own `/tmp` and `/opt/ml` (`HOST_PRIVATE_DIRS`), not
this machine's: an interpreter or virtual environment there cannot run in a
host, which `check_interpreter` says at start. This module never imports
TensorFlow.
"""

import dataclasses
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from typing import Dict, List, Mapping, Optional, Sequence

import psutil

IP = "ip"
UNSHARE = "unshare"
NETNS_ETC = "/etc/netns"
NAMESPACE_PREFIX = "dfm"
SWITCH = "sw"
BRIDGE = "br0"
DEFAULT_INTERFACE = "eth0"
# RFC 2544's benchmarking range: never routed, and here only inside the
# job's own namespaces.
DEFAULT_SUBNET = "198.18.0.0/24"
TOKEN_BUCKET_BURST_BYTES = 512 * 1024
TOKEN_BUCKET_LATENCY_MS = 10
STOP_GRACE_SECONDS = 5.0
REQUIRED_TOOLS = ("ip", "unshare", "mount")
HOST_INIT_MODULE = "jobs.local.host_init"
# Directories every host has of its own (its init bind-mounts them): what this machine holds there is hidden.
HOST_PRIVATE_DIRS = ("/tmp", "/opt/ml")


class HostSetupError(RuntimeError):
    """The emulated hosts cannot be created here; the message says why and what to do."""


@dataclasses.dataclass(frozen=True)
class LinkModel:
    """A host's network link: egress bandwidth limit (latency is not modelled).

    Attributes:
      gbps: egress bandwidth of each host in Gbit/s; 0 for no limit.
    """

    gbps: float = 0.0

    def __post_init__(self):
        if self.gbps < 0:
            raise ValueError("link bandwidth must be >= 0 Gbit/s, got %r" % self.gbps)


@dataclasses.dataclass(frozen=True)
class Host:
    """One emulated host.

    Attributes:
      name: its host name (e.g. `algo-1`).
      namespace: its network namespace.
      address: its IPv4 address.
      cpus: the cores its processes are pinned to (empty: not pinned).
      aliases: other names of it that every host resolves (a pod's
        fully qualified names).
    """

    name: str
    namespace: str
    address: str
    cpus: tuple = ()
    aliases: tuple = ()


def check_privileges() -> Optional[str]:
    """Why emulated hosts cannot be created here, or None if they can."""
    if os.geteuid() != 0:
        return ("emulated hosts are Linux network namespaces, which need root (CAP_SYS_ADMIN); "
                "run as root, or use --instance_count 1, which runs without a namespace")
    missing = [tool for tool in REQUIRED_TOOLS if shutil.which(tool) is None]
    if missing:
        return ("emulated hosts need %s (Debian packages iproute2 and util-linux); missing: %s"
                % (", ".join(REQUIRED_TOOLS), ", ".join(missing)))
    return None


def check_interpreter(python: str = sys.executable, private_dirs: Sequence[str] = HOST_PRIVATE_DIRS) -> None:
    """Refuses an interpreter the hosts cannot see: under a directory each host has of its own.

    The hosts run `python` (the SageMaker toolkit and the training in it),
    after their init has mounted their own `/tmp` and `/opt/ml`. Checked: the
    interpreter as given (a virtual environment's `bin/python`), the file it
    resolves to, and for this process's interpreter its environment's prefix
    and base prefix.

    Raises:
      HostSetupError: the reason, and what to do instead.
    """
    paths = {"the interpreter": python, "the interpreter's file": os.path.realpath(python)}
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        paths.update({"its environment": sys.prefix, "its base installation": sys.base_prefix})
    for what, path in paths.items():
        for directory in private_dirs:
            if os.path.abspath(path) == directory or os.path.abspath(path).startswith(directory.rstrip("/") + "/"):
                raise HostSetupError(
                    "%s, %s, is under %s, which every emulated host replaces with its own: the hosts cannot run "
                    "it. Install the interpreter or virtual environment outside %s (e.g. python3 -m venv "
                    "~/venvs/deepfm) and run from there" % (what, path, directory, ", ".join(private_dirs)))


def assign_cpus(num_hosts: int, cpus_per_host: int, available: Optional[Sequence[int]] = None) -> List[tuple]:
    """The cores of each host: consecutive blocks of `cpus_per_host` of the available ones.

    Args:
      num_hosts: hosts to place.
      cpus_per_host: cores per host; 0 leaves every host unpinned.
      available: the cores to use (default: this process's CPU affinity).

    Raises:
      ValueError: more cores asked for than available; the message gives both.
    """
    if cpus_per_host < 0:
        raise ValueError("--cpus_per_host must be >= 0, got %r" % cpus_per_host)
    if cpus_per_host == 0:
        return [() for _ in range(num_hosts)]
    cores = sorted(os.sched_getaffinity(0) if available is None else available)
    if num_hosts * cpus_per_host > len(cores):
        raise ValueError("%d host(s) x --cpus_per_host %d need %d cores; this machine has %d (%s)"
                         % (num_hosts, cpus_per_host, num_hosts * cpus_per_host, len(cores),
                            ",".join(map(str, cores))))
    return [tuple(cores[i * cpus_per_host:(i + 1) * cpus_per_host]) for i in range(num_hosts)]


def _run(argv: Sequence[str], check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if check and result.returncode != 0:
        raise HostSetupError("%s failed (exit code %d): %s"
                             % (" ".join(argv), result.returncode, result.stderr.strip()))
    return result


def list_namespaces() -> List[str]:
    """The names of the machine's network namespaces."""
    result = _run([IP, "netns", "list"], check=False)
    return [line.split()[0] for line in result.stdout.splitlines() if line.strip()]


def namespace_pids(namespace: str) -> List[int]:
    """The processes in a network namespace."""
    result = _run([IP, "netns", "pids", namespace], check=False)
    return [int(pid) for pid in result.stdout.split() if pid.isdigit()]


def remove_stale_namespaces() -> List[str]:
    """Removes namespaces of this module whose owning process is gone.

    Returns:
      The removed namespaces.
    """
    removed = []
    for namespace in list_namespaces():
        parts = namespace.split("-")
        if len(parts) < 3 or parts[0] != NAMESPACE_PREFIX or not parts[1].isdigit():
            continue
        if psutil.pid_exists(int(parts[1])):
            continue
        _remove_namespace(namespace)
        removed.append(namespace)
    return removed


def _kill_namespace_processes(namespace: str, grace_seconds: float = STOP_GRACE_SECONDS) -> None:
    processes = []
    for pid in namespace_pids(namespace):
        try:
            process = psutil.Process(pid)
            process.send_signal(signal.SIGTERM)
            processes.append(process)
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(processes, timeout=grace_seconds)
    for process in alive:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=grace_seconds)


def _remove_namespace(namespace: str) -> None:
    _kill_namespace_processes(namespace)
    _run([IP, "netns", "delete", namespace], check=False)
    shutil.rmtree(os.path.join(NETNS_ETC, namespace), ignore_errors=True)


class HostNetwork:
    """`num_hosts` emulated hosts joined by a bridge; see the module docstring.

    Args:
      host_names: the hosts' names, in order (e.g. `algo-1`, `algo-2`).
      cpus: per host, the cores its processes are pinned to (see
        `assign_cpus`); default: none pinned.
      interface: the name of each host's network interface.
      subnet: the hosts' IPv4 subnet; host i gets its (i + 1)-th address.
      link: the link model of every host.
      aliases: host name -> other names of it that every host resolves.

    Raises:
      HostSetupError: no root, a missing tool, or a failed `ip` command.
    """

    def __init__(self, host_names: Sequence[str], cpus: Optional[Sequence[tuple]] = None,
                 interface: str = DEFAULT_INTERFACE, subnet: str = DEFAULT_SUBNET,
                 link: LinkModel = LinkModel(), aliases: Optional[Mapping[str, Sequence[str]]] = None):
        reason = check_privileges()
        if reason:
            raise HostSetupError(reason)
        network = ipaddress.ip_network(subnet)
        if len(host_names) + 1 > network.num_addresses - 2:
            raise ValueError("subnet %s is too small for %d hosts" % (subnet, len(host_names)))
        cpus = list(cpus) if cpus is not None else [() for _ in host_names]
        if len(cpus) != len(host_names):
            raise ValueError("%d CPU sets for %d hosts" % (len(cpus), len(host_names)))
        self._prefix = "%s-%d-%x" % (NAMESPACE_PREFIX, os.getpid(), id(self) & 0xffffff)
        self._switch = "%s-%s" % (self._prefix, SWITCH)
        self.interface = interface
        self.link = link
        addresses = list(network.hosts())
        aliases = aliases or {}
        self.hosts = [Host(name=name, namespace="%s-%s" % (self._prefix, name),
                           address=str(addresses[index]), cpus=tuple(cpus[index]),
                           aliases=tuple(aliases.get(name, ())))
                      for index, name in enumerate(host_names)]
        self._prefix_length = network.prefixlen
        self._created: List[str] = []
        remove_stale_namespaces()
        try:
            self._create()
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> "HostNetwork":
        return self

    def __exit__(self, exc_type, exc, traceback) -> None:
        self.close()

    def host(self, name: str) -> Host:
        """The host called `name`.

        Raises:
          KeyError: no such host; the message lists them.
        """
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError("no host %r; the hosts are %s" % (name, ", ".join(h.name for h in self.hosts)))

    def etc_dir(self, host: Host) -> str:
        """The directory whose entries `ip netns exec` mounts over `/etc` in `host`."""
        return os.path.join(NETNS_ETC, host.namespace)

    def _add_namespace(self, namespace: str) -> None:
        _run([IP, "netns", "add", namespace])
        self._created.append(namespace)
        _run([IP, "-n", namespace, "link", "set", "lo", "up"])

    def _create(self) -> None:
        self._add_namespace(self._switch)
        _run([IP, "-n", self._switch, "link", "add", BRIDGE, "type", "bridge"])
        _run([IP, "-n", self._switch, "link", "set", BRIDGE, "up"])
        hosts_file = "127.0.0.1\tlocalhost\n" + "".join(
            "%s\t%s\n" % (host.address, " ".join(host.aliases + (host.name,))) for host in self.hosts)
        for index, host in enumerate(self.hosts):
            self._add_namespace(host.namespace)
            port = "p%d" % index
            _run([IP, "link", "add", self.interface, "netns", host.namespace, "type", "veth",
                  "peer", "name", port, "netns", self._switch])
            _run([IP, "-n", self._switch, "link", "set", port, "master", BRIDGE])
            _run([IP, "-n", self._switch, "link", "set", port, "up"])
            _run([IP, "-n", host.namespace, "addr", "add", "%s/%d" % (host.address, self._prefix_length),
                  "dev", self.interface])
            _run([IP, "-n", host.namespace, "link", "set", self.interface, "up"])
            if self.link.gbps:
                _run([IP, "netns", "exec", host.namespace, "tc", "qdisc", "add", "dev", self.interface,
                      "root", "tbf", "rate", "%dmbit" % round(self.link.gbps * 1000),
                      "burst", str(TOKEN_BUCKET_BURST_BYTES), "latency", "%dms" % TOKEN_BUCKET_LATENCY_MS])
            etc = self.etc_dir(host)
            os.makedirs(etc, exist_ok=True)
            with open(os.path.join(etc, "hosts"), "w") as f:
                f.write(hosts_file)
            with open(os.path.join(etc, "hostname"), "w") as f:
                f.write(host.name + "\n")
            open(os.path.join(etc, "environment"), "w").close()

    def command(self, host: Host, init_spec: str, python: str = sys.executable) -> List[str]:
        """The command line that runs `jobs.local.host_init` with `init_spec` as `host`'s init.

        Args:
          host: the host.
          init_spec: path of the JSON written by `write_init_spec`.
          python: the interpreter of the init.
        """
        # If unshare dies, its child (the host's init) gets SIGTERM, which the
        # init passes to every process of the host, as a container stop does.
        return [IP, "netns", "exec", host.namespace, UNSHARE, "--pid", "--fork", "--kill-child=SIGTERM",
                "--mount-proc", "--uts", "--", python, "-m", HOST_INIT_MODULE, init_spec]

    def pids(self, host: Host) -> List[int]:
        """The processes running in `host`."""
        return namespace_pids(host.namespace)

    def close(self) -> None:
        """Kills every process in the hosts and removes the namespaces. Safe to call twice."""
        for namespace in reversed(self._created):
            _remove_namespace(namespace)
        self._created = []


@dataclasses.dataclass(frozen=True)
class InitSpec:
    """What `jobs.local.host_init` does in a host before running its command.

    Attributes:
      hostname: the host name to set (in the host's own UTS namespace).
      binds: (source, target) directories to bind-mount, in order; a
        missing target directory is created.
      cpus: the cores to pin to (empty: not pinned).
      argv: the host's command.
      env: its whole environment.
      cwd: its working directory.
    """

    hostname: str
    argv: tuple
    env: Dict[str, str]
    binds: tuple = ()
    cpus: tuple = ()
    cwd: str = "/"

    def write(self, path: str) -> str:
        """Writes the spec as JSON to `path` and returns `path`."""
        with open(path, "w") as f:
            json.dump(dataclasses.asdict(self), f, indent=1)
        return path

    @classmethod
    def read(cls, path: str) -> "InitSpec":
        with open(path) as f:
            data = json.load(f)
        return cls(hostname=data["hostname"], argv=tuple(data["argv"]), env=dict(data["env"]),
                   binds=tuple(tuple(pair) for pair in data["binds"]), cpus=tuple(data["cpus"]),
                   cwd=data["cwd"])


def wait_for_exit(processes: Sequence[subprocess.Popen], timeout: float) -> bool:
    """Waits up to `timeout` seconds for every process to exit; True if they did."""
    deadline = time.monotonic() + timeout
    for process in processes:
        try:
            process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            return False
    return True
