"""The ports `deepfm.launch` gives a job's servers are free on every address of the machine.

A task's TensorFlow server (a parameter server's, a training task's)
listens on every address of its machine (gRPC's wildcard), some seconds
after `processes.free_ports` chose its port. A port checked free on
`localhost` alone, but held on another address of the machine, fails that
bind: the task exits with code 1 ("Could not start gRPC server") although
nothing was wrong with the job, and the launcher spends a restart on it.
"""

import json
import socket
import subprocess
import sys
import textwrap

import pytest
from absl.testing import absltest

from jobs.local import launcher, processes
from strategies import cluster as cluster_lib
from strategies import strategy_names
from tests import command_line, paths

# Another address of this machine: Linux routes the whole of 127.0.0.0/8 to the loopback interface.
OTHER_ADDRESS = "127.0.0.2"
SEED = 7
SERVERS_TIMEOUT_S = 120
# Starts the TensorFlow server of each task whose TF_CONFIG is an argument, as each task of a ps job does
# (`strategies.ps`), in one process; exits 1 when one cannot start.
START_SERVERS = textwrap.dedent("""
    import json, sys
    import tensorflow as tf
    for tf_config in sys.argv[1:]:
        task = json.loads(tf_config)["task"]
        spec = tf.train.ClusterSpec(json.loads(tf_config)["cluster"])
        tf.distribute.Server(spec, job_name=task["type"], task_index=task["index"], start=True)
        print("started", task["type"], task["index"], flush=True)
""")


class ServerPortsTest(absltest.TestCase):

    def hold_elsewhere(self, port: int) -> None:
        """Listens on `port` at `OTHER_ADDRESS` (not at localhost's 127.0.0.1) for the rest of the test."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.addCleanup(sock.close)
        sock.bind((OTHER_ADDRESS, port))
        sock.listen()

    def test_a_port_held_on_another_address_is_not_given(self):
        first = processes.free_ports(3, seed=SEED)
        self.hold_elsewhere(first[0])
        again = processes.free_ports(3, seed=SEED)
        self.assertNotIn(first[0], again)
        self.assertEqual(first[1:], again[:2])

    def test_a_port_connected_from_is_not_given(self):
        # An open connection's local port (any process's, on any address) blocks a server's bind there too.
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.addCleanup(listener.close)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        first = processes.free_ports(2, seed=SEED)
        client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.addCleanup(client.close)
        client.bind((OTHER_ADDRESS, first[0]))
        client.connect(listener.getsockname())
        self.assertNotIn(first[0], processes.free_ports(2, seed=SEED))

    @pytest.mark.slow
    def test_every_server_of_a_ps_job_starts_on_the_ports_given(self):
        # The launcher's restart draws new ports; here the draw's first port is held on another address, as a
        # program of the machine may hold it, and each task's real server then starts on the ports given.
        first = processes.free_ports(4, seed=SEED)
        self.hold_elsewhere(first[0])
        ports = processes.free_ports(4, seed=SEED)
        config = launcher.LaunchConfig(strategy=strategy_names.PS, log_dir=self.create_tempdir().full_path,
                                       num_ps=2, num_workers=2)
        specs = launcher.ps_tasks(config, ["--model_dir", self.create_tempdir().full_path], ports,
                                  command_line.environment())
        tf_configs = [spec.env[cluster_lib.TF_CONFIG_VARIABLE] for spec in specs]
        self.assertCountEqual(ports, [int(address.rsplit(":", 1)[1]) for address in
                                      sum(json.loads(tf_configs[0])["cluster"].values(), [])])
        env = dict(specs[0].env, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=paths.REPO_ROOT)
        env.pop(cluster_lib.TF_CONFIG_VARIABLE)
        result = subprocess.run([sys.executable, "-c", START_SERVERS] + tf_configs, capture_output=True, text=True,
                                env=env, cwd=paths.REPO_ROOT, timeout=SERVERS_TIMEOUT_S, check=False)
        self.assertEqual(0, result.returncode, "a server did not start: %s" % result.stderr[-3000:])
        self.assertEqual(["started %s" % spec.name.replace("_", " ") for spec in specs],
                         result.stdout.splitlines())


if __name__ == "__main__":
    absltest.main()
