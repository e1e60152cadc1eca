"""The supervisor of one emulated host, and the parameter server a `ps` host runs.

    python -m benchmarks.scale_out.supervisor host SPEC.json
    python -m benchmarks.scale_out.supervisor ps

`host` runs as the host's command (inside its namespaces, or pinned to its
cores on this machine): it serves Horovod's Gloo rendezvous where the spec
says so (what `horovodrun --gloo` does), starts the host's processes (the
spec's argv, environment and log of each), samples their CPU time
(`benchmarks.common.ProcessTreeSampler`) and the host's interface counters
(`/sys/class/net/<interface>/statistics/{tx,rx}_bytes`) every
`SAMPLE_SECONDS`, and writes what it saw as JSON (`spec["output"]`). A
SIGTERM stops its processes; it still writes what it measured. A process
may wait for ports of other hosts (`wait_for`: `host:port`, what SageMaker's
toolkit does for sshd before `mpirun`); a host whose work is started from
another (its ranks by `mpirun` over ssh) runs until `until_file` exists,
which the starting host's supervisor writes as `done_file` when its own
processes have ended. Open MPI's daemon started over ssh leaves its ssh
session (the host's init adopts it and its ranks): with `sample_adopted`
the supervisor also samples everything under the host's init but itself,
as `ADOPTED`.

`ps` is a parameter server as SageMaker's toolkit runs one: a plain
`tf.distribute.Server` from `TF_CONFIG`, until its host's trainer ends.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Optional, Sequence

from benchmarks import common

SAMPLE_SECONDS = 0.2
RENDEZVOUS_WAIT_S = 120
PROC_STAT = "/proc/stat"
IDLE_FIELD, IOWAIT_FIELD = 3, 4
MODULE = "benchmarks.scale_out.supervisor"
HOST_COMMAND, PS_COMMAND = "host", "ps"
# The name of what a host's init adopted (daemons and their children), sampled where the spec says.
ADOPTED = "adopted"


class CounterSampler(common.PeriodicSampler):
    """Samples an interface's tx/rx byte counters every `interval_s` seconds in a thread (none: zeros)."""

    def __init__(self, interface: Optional[str], interval_s: float):
        super().__init__(interval_s, "counter-sampler")
        self._paths = (["/sys/class/net/%s/statistics/%s_bytes" % (interface, kind) for kind in ("tx", "rx")]
                       if interface else [])

    def sample(self) -> None:
        values = [0, 0]
        for index, path in enumerate(self._paths):
            with open(path) as f:
                values[index] = int(f.read())
        self.samples.append((time.time(), values[0], values[1]))


class MachineCpuSampler(common.PeriodicSampler):
    """Samples the machine's busy CPU seconds (every core, `/proc/stat`) every `interval_s` seconds."""

    def __init__(self, interval_s: float):
        super().__init__(interval_s, "machine-cpu-sampler")
        self._tick = os.sysconf("SC_CLK_TCK")

    def sample(self) -> None:
        with open(PROC_STAT) as f:
            fields = [int(v) for v in f.readline().split()[1:]]
        # user nice system idle iowait irq softirq steal ...: busy = all but idle and iowait.
        busy = sum(fields) - fields[IDLE_FIELD] - fields[IOWAIT_FIELD]
        self.samples.append((time.time(), busy / self._tick))


def start_rendezvous(plan: str, port_file: str):
    """Horovod's Gloo rendezvous server for the slot plan `plan` (`algo-1:2,algo-2:2`); writes its port."""
    from horovod.runner.common.util import hosts as hvd_hosts
    from horovod.runner.http.http_server import RendezvousServer
    slots = hvd_hosts.get_host_assignments(hvd_hosts.parse_hosts(plan), sum(
        int(item.split(":")[1]) for item in plan.split(",")))
    server = RendezvousServer()
    port = server.start()
    server.init(slots)
    with open(port_file + ".tmp", "w") as f:
        f.write(str(port))
    os.replace(port_file + ".tmp", port_file)
    return server


def wait_for_port(port_file: str, timeout_s: float) -> str:
    """The rendezvous port the first host wrote to `port_file`.

    Raises:
      TimeoutError: none after `timeout_s`.
    """
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(port_file):
        if time.monotonic() > deadline:
            raise TimeoutError("no Horovod rendezvous port in %s after %.0f s" % (port_file, timeout_s))
        time.sleep(0.05)
    with open(port_file) as f:
        return f.read().strip()


def wait_for_ports(addresses: Sequence[str], timeout_s: float) -> None:
    """Waits until every `host:port` of `addresses` accepts a connection.

    Raises:
      TimeoutError: one did not after `timeout_s`; the message names it.
    """
    deadline = time.monotonic() + timeout_s
    for address in addresses:
        host, port = address.rsplit(":", 1)
        while True:
            try:
                socket.create_connection((host, int(port)), timeout=1.0).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise TimeoutError("nothing listens on %s after %.0f s" % (address, timeout_s)) from None
                time.sleep(0.05)


def run_ps() -> int:
    """A parameter server as SageMaker's toolkit runs one: a `tf.distribute.Server` from `TF_CONFIG`, for ever."""
    import tensorflow as tf
    tf_config = json.loads(os.environ["TF_CONFIG"])
    server = tf.distribute.Server(tf.train.ClusterSpec(tf_config["cluster"]), job_name="ps",
                                  task_index=tf_config["task"]["index"],
                                  config=tf.compat.v1.ConfigProto(device_count={"GPU": 0}))
    server.join()
    return 0


def run_host(spec_path: str) -> int:
    """The supervisor of one host: starts its processes, samples them, writes the host's JSON."""
    with open(spec_path) as f:
        spec = json.load(f)
    server = None
    rendezvous = spec.get("rendezvous")
    extra_env = {}
    if rendezvous:
        if rendezvous["serve"]:
            server = start_rendezvous(rendezvous["plan"], rendezvous["port_file"])
        extra_env["HOROVOD_GLOO_RENDEZVOUS_PORT"] = wait_for_port(rendezvous["port_file"], RENDEZVOUS_WAIT_S)
    procs, samplers = [], []
    failed = None
    stop = threading.Event()
    # The benchmark stops a host whose processes outlive the job (`runner.STRAGGLER_GRACE_S`) with SIGTERM.
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    with CounterSampler(spec.get("interface"), SAMPLE_SECONDS) as counters:
        for item in spec["processes"]:
            try:
                wait_for_ports(item.get("wait_for", ()), RENDEZVOUS_WAIT_S)
            except TimeoutError as e:
                # Not started: the host ends now, its done file written, and says why.
                failed = "%s: %s" % (item["name"], e)
                break
            log = open(item["log"], "w")
            proc = subprocess.Popen(item["argv"], env=dict(item["env"], **extra_env), stdout=log,
                                    stderr=subprocess.STDOUT, cwd=spec["cwd"])
            log.close()
            sampler = common.ProcessTreeSampler(proc.pid, SAMPLE_SECONDS)
            sampler.__enter__()
            procs.append((item["name"], proc))
            samplers.append(sampler)
        if spec.get("sample_adopted"):
            # Under the host's init (this supervisor's parent), everything but this supervisor's own tree.
            sampler = common.ProcessTreeSampler(os.getppid(), SAMPLE_SECONDS, exclude=(os.getpid(),))
            sampler.__enter__()
            samplers.append(sampler)
        pending = dict(procs)
        services = {item["name"] for item in spec["processes"] if item.get("service")}
        until_file = spec.get("until_file")

        def busy() -> bool:
            return not os.path.exists(until_file) if until_file else bool(set(pending) - services)

        while busy() and failed is None and not stop.is_set():
            for name, proc in list(pending.items()):
                code = proc.poll()
                if code is None:
                    continue
                del pending[name]
                if code != 0:
                    failed = "%s exited with %d" % (name, code)
            time.sleep(0.1)
        stopped = sorted(set(pending) - services) if stop.is_set() else []
        for proc in pending.values():
            proc.kill()
            proc.wait()
        for sampler in samplers:
            sampler.__exit__(None, None, None)
    if server is not None:
        server.stop()
    if spec.get("done_file"):
        open(spec["done_file"], "w").close()
    with open(spec["output"] + ".tmp", "w") as f:
        json.dump({"counters": counters.samples, "failed": failed, "stopped": stopped,
                   "processes": {name: sampler.samples for name, sampler in zip(
                       [name for name, _ in procs] + [ADOPTED], samplers)}}, f)
    os.replace(spec["output"] + ".tmp", spec["output"])
    return 1 if failed else 0


def command(python: str, spec_path: str) -> list:
    """The command line of a host's supervisor."""
    return [python, "-m", MODULE, HOST_COMMAND, spec_path]


def ps_command(python: str) -> list:
    """The command line of a `ps` host's parameter server."""
    return [python, "-m", MODULE, PS_COMMAND]


def main(argv: Sequence[str]) -> int:
    if len(argv) == 3 and argv[1] == HOST_COMMAND:
        return run_host(argv[2])
    if len(argv) == 2 and argv[1] == PS_COMMAND:
        return run_ps()
    print("usage: python -m %s %s SPEC.json | %s" % (MODULE, HOST_COMMAND, PS_COMMAND), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
