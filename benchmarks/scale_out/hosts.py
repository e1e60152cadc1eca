"""The hosts a run's processes start in: emulated (network namespaces) or local (blocks of this machine's cores).

* `EmulatedHosts` (`HOSTS_EMULATED`): `jobs.local.hosts.HostNetwork`, a network
  namespace per host with its own address and name (`algo-1`, ...), an
  optional token-bucket egress limit per host (this kernel has no `netem`,
  so latency is not modelled). Each run starts every host's supervisor as
  the host's init, pinned to the host's cores. `install_ssh` gives every
  host the ssh set-up of SageMaker's local emulation (`jobs.sagemaker.local`:
  a host key, a client key every sshd accepts) for variants that start
  their ranks with `mpirun` over ssh. Needs root.
* `LocalHosts` (`HOSTS_LOCAL`): no namespaces (a machine where they cannot
  be made): a host is its supervisor's process group on this machine,
  pinned to the host's cores with `taskset`; ranks meet over the loopback
  interface at 127.0.0.1, whose byte counters (the whole machine's) are
  sampled once, on the first host; no bandwidth limit; `ps` needs host
  names and runs only on emulated hosts.

`open_hosts` makes either; `HOSTS_AUTO` makes emulated hosts where it can
(namespaces made, and a command run in one: `probe`) and says why not
where it falls back to local ones.

Either takes `host_memory` (`--host_memory 6g`): every host's processes
run in a memory cgroup of that limit (`jobs.local.memory`), a fresh one for
each run, joined by the host's first process before it execs; a run that
fails says which host was killed for memory, its peak and its limit
(`memory_report`).
"""

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Union

from benchmarks.scale_out import layout
from benchmarks.scale_out.config import HOSTS_AUTO, HOSTS_EMULATED, HOSTS_LOCAL
from benchmarks.scale_out.variants import host_names
from jobs.local import hosts as hosts_lib
from jobs.local import memory as memory_lib
from jobs.local import ssh

LOOPBACK = "lo"
LOCAL_ADDRESS = "127.0.0.1"
PROBE_TIMEOUT_S = 60
SSH_KEY_COMMENT = "bench-scale-out"


class HostsMemory:
    """The memory cgroups of the hosts' runs: one per host and run, removed when the host starts again or closes.

    Args:
      names: the hosts' names.
      limit: each host's limit (`jobs.local.memory.parse_size`); "" for none
        (the cgroups are then made only where they can be, for the peak).

    Raises:
      memory_lib.MemoryLimitError: a limit where memory cgroups cannot be made.
    """

    def __init__(self, names: Sequence[str], limit: str = ""):
        self._names = list(names)
        self._memories = memory_lib.HostMemories(limit)
        self._current: Dict[int, memory_lib.HostMemory] = {}
        self._starts = 0

    def preexec(self, index: int) -> Optional[Callable[[], None]]:
        """A fresh cgroup for host `index`'s next run (the previous run's removed): its first process joins it."""
        previous = self._current.pop(index, None)
        if previous is not None:
            previous.remove()
        self._starts += 1
        memory = self._memories.host("%s.%d" % (self._names[index], self._starts))
        if memory is None:
            return None
        memory.host = self._names[index]
        self._current[index] = memory
        return memory.join

    @property
    def cgroups(self) -> List[memory_lib.HostMemory]:
        """The cgroups of the hosts' last runs, by host index."""
        return [self._current[index] for index in sorted(self._current)]

    def report(self) -> str:
        """`; host algo-2 ... killed for memory ...` for each host of the last runs that was, else ""."""
        events = [event for event in (memory.take_event() for memory in self._current.values()) if event]
        return "".join("; killed for memory: %s" % event.describe() for event in events)

    def close(self) -> None:
        self._current = {}
        self._memories.close()


class EmulatedHosts:
    """Hosts in network namespaces (`jobs.local.hosts`); see the module docstring."""

    mode = HOSTS_EMULATED
    interface = hosts_lib.DEFAULT_INTERFACE

    def __init__(self, count: int, link_gbps: float, host_memory: str = ""):
        self.memory = HostsMemory(host_names(count), host_memory)
        try:
            self._network = hosts_lib.HostNetwork(host_names(count), link=hosts_lib.LinkModel(gbps=link_gbps))
        except BaseException:
            self.memory.close()
            raise
        self.names = tuple(host.name for host in self._network.hosts)
        self.note = ""
        self._ssh_dir: Optional[str] = None

    def install_ssh(self) -> None:
        """Gives every host one sshd and ssh client set-up, as SageMaker's image does (once; see the module)."""
        if self._ssh_dir is not None:
            return
        self._ssh_dir = tempfile.mkdtemp(prefix="bench-scale-out-ssh-")
        source = os.path.join(self._ssh_dir, ssh.SSH)
        etc_ssh = ssh.ETC_SSH
        ssh.write_setup(source, SSH_KEY_COMMENT,
                                        authorized_keys=os.path.join(etc_ssh, "authorized_keys"),
                                        identity=os.path.join(etc_ssh, ssh.KEY_NAME))
        for host in self._network.hosts:
            ssh.install_etc_ssh(source, self._network, host)

    def address(self, name: str) -> str:
        """How the host called `name` is reached from the others."""
        return name

    def interface_of(self, index: int) -> Optional[str]:
        """The interface whose counters host `index` samples."""
        return self.interface

    def start(self, index: int, argv: Sequence[str], env: dict, cpus: Sequence[int], cwd: str, work: str,
              log_path: str) -> subprocess.Popen:
        """Starts `argv` as host `index`'s init's command, every process of the host pinned to `cpus`."""
        host = self._network.hosts[index]
        init = hosts_lib.InitSpec(hostname=host.name, argv=tuple(argv), env=env, cpus=tuple(cpus), cwd=cwd)
        init_path = init.write(os.path.join(work, "init-%s.json" % host.name))
        with open(log_path, "w") as log:
            return subprocess.Popen(self._network.command(host, init_path), stdout=log, stderr=subprocess.STDOUT,
                                    preexec_fn=self.memory.preexec(index))

    def memory_report(self) -> str:
        """The hosts of the last runs killed for memory (`HostsMemory.report`)."""
        return self.memory.report()

    @staticmethod
    def kill(proc: subprocess.Popen) -> None:
        """Kills a host started by `start`: its init, and so everything in it."""
        if proc.poll() is None:
            proc.kill()
        proc.wait()

    def close(self) -> None:
        self._network.close()
        self.memory.close()
        if self._ssh_dir is not None:
            shutil.rmtree(self._ssh_dir, ignore_errors=True)


class LocalHosts:
    """Hosts as blocks of this machine's cores, without namespaces; see the module docstring."""

    mode = HOSTS_LOCAL
    interface = LOOPBACK

    def __init__(self, count: int, note: str = "", host_memory: str = ""):
        self.names = host_names(count)
        self.note = note
        self.memory = HostsMemory(self.names, host_memory)

    def address(self, name: str) -> str:
        del name
        return LOCAL_ADDRESS

    def interface_of(self, index: int) -> Optional[str]:
        # One loopback interface for every host: counted once.
        return LOOPBACK if index == 0 else None

    def start(self, index: int, argv: Sequence[str], env: dict, cpus: Sequence[int], cwd: str, work: str,
              log_path: str) -> subprocess.Popen:
        """Starts `argv` in a session of its own, pinned to `cpus` (`taskset`), in host `index`'s memory cgroup."""
        del work
        pin = [layout.TASKSET, "--cpu-list", layout.cpu_list(cpus)] if cpus else []
        with open(log_path, "w") as log:
            return subprocess.Popen(pin + list(argv), env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True, preexec_fn=self.memory.preexec(index))

    def memory_report(self) -> str:
        """The hosts of the last runs killed for memory (`HostsMemory.report`)."""
        return self.memory.report()

    @staticmethod
    def kill(proc: subprocess.Popen) -> None:
        """Kills a host started by `start`: its supervisor's process group (its processes with it)."""
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()

    @staticmethod
    def install_ssh() -> None:
        raise ValueError("hosts without namespaces share this machine's /etc/ssh: mpirun over ssh runs only on "
                         "emulated hosts (--hosts_mode emulated)")

    def close(self) -> None:
        self.memory.close()


def local_reason() -> Optional[str]:
    """Why local hosts cannot run here (no `taskset`), or None."""
    if shutil.which(layout.TASKSET) is None:
        return "no %s on PATH (Debian package util-linux): hosts cannot be pinned to their cores" % layout.TASKSET
    return None


def probe(hosts: EmulatedHosts, timeout_s: float = PROBE_TIMEOUT_S, argv: Optional[Sequence[str]] = None) -> None:
    """Runs a do-nothing command (`argv`) in the first host: namespaces can be made yet not entered (a container).

    Raises:
      hosts_lib.HostSetupError: it did not exit with 0 within `timeout_s`; the message holds its output.
    """
    with tempfile.TemporaryDirectory(prefix="bench-hosts-probe-") as work:
        log = os.path.join(work, "probe.log")
        proc = hosts.start(0, list(argv or (sys.executable, "-c", "pass")), {"PATH": os.environ.get("PATH", "")}, (),
                           "/", work, log)
        try:
            code = proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            hosts.kill(proc)
        if code != 0:
            with open(log, errors="replace") as f:
                raise hosts_lib.HostSetupError("a command in an emulated host %s: %s" % (
                    "did not end in %.0f s" % timeout_s if code is None else "exited with %d" % code,
                    f.read()[-500:].strip()))


@contextlib.contextmanager
def open_hosts(mode: str, count: int, link_gbps: float, host_memory: str = ""
               ) -> Iterator[Union["EmulatedHosts", "LocalHosts"]]:
    """`count` hosts of `mode` (`HOSTS_AUTO`: emulated where they can be made, else local, saying why).

    Args:
      mode: `HOSTS_EMULATED`, `HOSTS_LOCAL` or `HOSTS_AUTO`.
      count: the hosts.
      link_gbps: each emulated host's egress limit (0: none).
      host_memory: each host's memory limit (`jobs.local.memory.parse_size`); "" for none.

    Raises:
      memory_lib.MemoryLimitError: `host_memory` where memory cgroups cannot be made.
      hosts_lib.HostSetupError: emulated hosts asked for and they cannot be made here.
      OSError: local hosts without `taskset`.
    """
    hosts: Union[EmulatedHosts, LocalHosts]
    if mode == HOSTS_LOCAL:
        reason = local_reason()
        if reason:
            raise OSError(reason)
        hosts = LocalHosts(count, host_memory=host_memory)
    else:
        try:
            reason = hosts_lib.check_privileges()
            if reason:
                raise hosts_lib.HostSetupError(reason)
            emulated = EmulatedHosts(count, link_gbps, host_memory)
            if mode == HOSTS_AUTO:
                try:
                    probe(emulated)
                except hosts_lib.HostSetupError:
                    emulated.close()
                    raise
            hosts = emulated
        except hosts_lib.HostSetupError as e:
            if mode != HOSTS_AUTO:
                raise
            print("emulated hosts cannot be made here (%s): hosts are blocks of this machine's cores, ranks "
                  "over the loopback interface" % e, file=sys.stderr, flush=True)
            hosts = LocalHosts(count, note="emulated hosts could not be made: %s" % e, host_memory=host_memory)
    try:
        yield hosts
    finally:
        hosts.close()

