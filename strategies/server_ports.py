"""TCP checks of a cluster's server addresses: who accepts connections, whose port is taken, waiting for all to close.

`strategies.ps` uses them around its servers: a task whose server cannot
bind names the port another program holds (`port_taken`), and the tasks
that outlive training wait for the others' servers to close
(`wait_until_all_closed`).
"""

import errno
import socket
import time
from typing import List, Mapping

# Time between looks of `wait_until_all_closed`, and each connection's timeout, unless the caller says.
POLL_SECONDS = 1.0


def accepts_connections(address: str, timeout_seconds: float) -> bool:
    """Whether something accepts a TCP connection at `host:port` within `timeout_seconds`."""
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_seconds):
            return True
    except OSError:
        return False


def port_taken(port: int) -> bool:
    """Whether another socket holds TCP `port` on some address of this machine, as a server's bind finds it.

    The check binds the IPv4 wildcard address with `SO_REUSEADDR`, as
    TensorFlow's gRPC server does, so a port held only by closed
    connections (`TIME_WAIT`) counts as free.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
        except OSError as e:
            return e.errno == errno.EADDRINUSE
    return False


def wait_until_all_closed(addresses: Mapping[str, str], timeout_seconds: float,
                          poll_seconds: float = POLL_SECONDS) -> List[str]:
    """Waits until nothing accepts TCP connections at any of `addresses`.

    Args:
      addresses: name -> `host:port`.
      timeout_seconds: the longest wait (0: look once).
      poll_seconds: time between looks (also each connection's timeout).

    Returns:
      The names of the addresses still accepting connections at the end,
      sorted; empty once all are closed.
    """
    deadline = time.monotonic() + timeout_seconds
    open_names = sorted(addresses)
    while True:
        open_names = [name for name in open_names if accepts_connections(addresses[name], poll_seconds)]
        if not open_names or time.monotonic() >= deadline:
            return open_names
        time.sleep(poll_seconds)
