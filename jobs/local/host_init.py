"""The init process of an emulated host (see `jobs.local.hosts`).

    python -m jobs.local.host_init SPEC.json

Runs as PID 1 of the host's own PID namespace, inside its network, mount
and UTS namespaces: sets the host name, bind-mounts the host's directories
(`/opt/ml`, a private `/tmp`, ...), pins itself and so every process of the
host to the host's cores, then starts the host's command and, like a
container's init, reaps orphans; SIGTERM, SIGINT and SIGHUP go to every
process of the host, as when a container is stopped, so that a training
script can checkpoint before the host goes away. It
exits with the command's exit code; the kernel then kills whatever else
still runs in the host.
"""

import os
import signal
import socket
import subprocess
import sys

from jobs.local import hosts

MOUNT = "mount"
EXIT_SETUP_FAILED = 125
SIGNAL_EXIT_BASE = 128


def _set_up(spec: hosts.InitSpec) -> None:
    socket.sethostname(spec.hostname)
    for source, target in spec.binds:
        os.makedirs(target, exist_ok=True)
        subprocess.run([MOUNT, "--bind", source, target], check=True)
    if spec.cpus:
        os.sched_setaffinity(0, spec.cpus)


def main(argv) -> int:
    if len(argv) != 2:
        print("usage: python -m jobs.local.host_init SPEC.json", file=sys.stderr)
        return EXIT_SETUP_FAILED
    spec = hosts.InitSpec.read(argv[1])
    try:
        _set_up(spec)
    except (OSError, subprocess.CalledProcessError) as e:
        print("host %s: set-up failed: %s" % (spec.hostname, e), file=sys.stderr, flush=True)
        return EXIT_SETUP_FAILED
    # A session of its own: a signal to the supervisor's process group reaches
    # this init only, which passes it on once to every process of the host.
    child = subprocess.Popen(list(spec.argv), env=spec.env, cwd=spec.cwd, start_new_session=True)
    stopping = []

    def forward(signum, frame):
        del frame
        stopping.append(signum)
        # Like a container being stopped: every process of the host gets the
        # signal (from PID 1, -1 means every process of this PID namespace).
        try:
            os.kill(-1, signum)
        except ProcessLookupError:
            pass
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    code = None
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            # Every process of the host has exited.
            return EXIT_SETUP_FAILED if code is None else code
        if stopping:
            print("host %s: stopping: process %d exited with %s" % (
                spec.hostname, pid, os.waitstatus_to_exitcode(status)), file=sys.stderr, flush=True)
        if pid == child.pid:
            code = os.waitstatus_to_exitcode(status)
            code = code if code >= 0 else SIGNAL_EXIT_BASE - code
            if not stopping:
                # The command is done: whatever else runs in the host ends with it.
                return code
            # Stopped: the others (a training script checkpointing) may finish
            # what they do; whoever stops the host kills them after its grace period.


if __name__ == "__main__":
    sys.exit(main(sys.argv))
