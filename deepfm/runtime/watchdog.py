"""A training task whose parameter server died fails in bounded time instead of hanging.

When a parameter server dies, TensorFlow 2.14's between-graph training
session notices the broken connection, treats it as a preemption and
re-creates its session, which waits for the lost task to come back: the
worker hangs. Measured here with one ps killed by SIGKILL (1 ps, a chief
and a worker on localhost): both training tasks were still waiting 150 s
later, with `ConfigProto.operation_timeout_in_ms` and
`RunConfig.session_creation_timeout_secs` at 120 s (they bound a step and
the session's readiness polling, not that wait).

`PeerWatchdog` checks, from a thread of the training task, that each
parameter server still accepts TCP connections on its gRPC port. A server
that accepted them once and then refuses (or times out) for
`PEER_LOST_AFTER_S` is lost: the task logs an error naming it (`ps_0 at
host:port`) and exits at once with `PEER_LOST_EXIT_CODE` (its training
session cannot be stopped cleanly, and its state lives on the lost server
anyway; checkpoints are unaffected). A launcher with restarts then starts
the job again from the latest checkpoint.

A task asked to stop (SIGTERM: a launcher, an orchestrator deleting its
pods) saves a checkpoint of variables that live on the parameter servers,
and those are often stopped at the same moment (Kubernetes stops a job's
pods together). Then a server that refuses connections (its process is
gone, not a network that failed) is lost at once: the save cannot reach
it, and waiting `PEER_LOST_AFTER_S` would only hold the stop.
"""

import contextlib
import logging as std_logging
import os
import socket
import sys
import threading
import time
from typing import Callable, Dict, Iterator, Mapping, Optional

from absl import logging

# EX_UNAVAILABLE of sysexits.h: a service this task needs is gone.
PEER_LOST_EXIT_CODE = 69
PEER_CHECK_INTERVAL_S = 2.0
PEER_LOST_AFTER_S = 20.0
# Between checks once the task was asked to stop.
STOPPING_INTERVAL_S = 0.2

LostCallback = Callable[[str, str, str], None]


def exit_on_lost(name: str, address: str, reason: str) -> None:
    """Logs that `name` is lost and ends this process with `PEER_LOST_EXIT_CODE`."""
    logging.error("parameter server %s at %s is gone (%s): stopping this training task with exit code %d; "
                  "restart the job to resume from the latest checkpoint", name, address, reason,
                  PEER_LOST_EXIT_CODE)
    for handler in std_logging.getLogger().handlers + logging.get_absl_logger().handlers:
        handler.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(PEER_LOST_EXIT_CODE)


class PeerWatchdog:
    """Watches that peer tasks accept TCP connections; reports one lost for too long.

    Args:
      peers: task name (e.g. `ps_0`) -> `host:port`.
      lost_after_s: how long a peer seen before may be unreachable.
      interval_s: time between checks (also each connection attempt's timeout).
      on_lost: called once, from the watchdog's thread, with the peer's
        name, address and the last error; default `exit_on_lost`.
      stopping: whether this task was asked to stop; then a peer seen
        before that refuses connections is lost at once.
    """

    def __init__(self, peers: Mapping[str, str], lost_after_s: float = PEER_LOST_AFTER_S,
                 interval_s: float = PEER_CHECK_INTERVAL_S, on_lost: Optional[LostCallback] = None,
                 stopping: Callable[[], bool] = lambda: False):
        self._stopping = stopping
        self._peers = dict(peers)
        self._lost_after_s = lost_after_s
        self._interval_s = interval_s
        self._on_lost = on_lost or exit_on_lost
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="peer-watchdog", daemon=True)
        self.lost: Optional[str] = None

    def start(self) -> "PeerWatchdog":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _reachable(self, address: str) -> Optional[OSError]:
        """None when `address` accepts a connection, else the error."""
        host, port = address.rsplit(":", 1)
        try:
            with socket.create_connection((host, int(port)), timeout=self._interval_s):
                return None
        except OSError as e:
            return e

    def _run(self) -> None:
        last_seen: Dict[str, float] = {}
        while not self._stop.is_set():
            stopping = self._stopping()
            for name, address in self._peers.items():
                error = self._reachable(address)
                now = time.monotonic()
                if error is None:
                    last_seen[name] = now
                elif name in last_seen and stopping and isinstance(error, ConnectionRefusedError):
                    self.lost = name
                    self._on_lost(name, address, "refuses connections while this task stops, its checkpoint "
                                                 "cannot be saved: %s" % error)
                    return
                elif name in last_seen and now - last_seen[name] > self._lost_after_s:
                    self.lost = name
                    self._on_lost(name, address, "unreachable for %.0f s: %s" % (now - last_seen[name],
                                                                                  str(error) or type(error).__name__))
                    return
            # Asked to stop, the task looks at its servers again soon: a save waits on them.
            self._stop.wait(STOPPING_INTERVAL_S if stopping else self._interval_s)


@contextlib.contextmanager
def watch_peers(peers: Mapping[str, str], **options) -> Iterator[Optional[PeerWatchdog]]:
    """Within the block, a lost peer ends this task (see the module docstring).

    Args:
      peers: the tasks this one cannot train without, name -> `host:port`
        (`Topology.peers`: a training task's parameter servers); none:
        nothing is watched.
      **options: passed to `PeerWatchdog`.
    """
    if not peers:
        yield None
        return
    watchdog = PeerWatchdog(peers, **options).start()
    try:
        yield watchdog
    finally:
        watchdog.stop()
