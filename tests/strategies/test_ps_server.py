"""A `ps` task whose server port another program holds fails naming the port.

TensorFlow's own error says only "Could not start gRPC server"; the task's
log then names the port and that it is taken, so that a restart no fault
caused (`deepfm.launch`, the soak) shows its cause.
"""

import json
import os
import socket
from unittest import mock

import tensorflow as tf

import strategies
from jobs.local import processes
from strategies import cluster as cluster_lib
from strategies import server_ports

# Another address of this machine: Linux routes the whole of 127.0.0.0/8 to the loopback interface.
OTHER_ADDRESS = "127.0.0.2"


class PSServerStartTest(tf.test.TestCase):

    def test_a_taken_port_is_named(self):
        port, other = processes.free_ports(2)
        held = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.addCleanup(held.close)
        held.bind((OTHER_ADDRESS, port))
        held.listen()
        self.assertTrue(server_ports.port_taken(port))
        tf_config = {"cluster": {"chief": ["localhost:%d" % other], "ps": ["localhost:%d" % port]},
                     "task": {"type": "ps", "index": 0}}
        with mock.patch.dict(os.environ, {cluster_lib.TF_CONFIG_VARIABLE: json.dumps(tf_config)}):
            strategy = strategies.get(strategies.make_config(name="ps"))
            strategy.setup()
            with self.assertRaisesRegex(RuntimeError, "ps_0 cannot listen at localhost:%d: port %d is taken on "
                                        "this machine by another program" % (port, port)):
                strategy.serve(exit_timeout_seconds=0)

    def test_a_free_port_is_not_taken(self):
        port, = processes.free_ports(1)
        self.assertFalse(server_ports.port_taken(port))


if __name__ == "__main__":
    tf.test.main()
