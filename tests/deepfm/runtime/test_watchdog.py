"""Tests of deepfm.runtime.watchdog: a training task whose parameter server died ends in bounded time."""

import glob
import os
import signal
import socket
import threading
import time

import pytest
import tensorflow as tf

from dataprep import synthetic
from deepfm.runtime import watchdog
from jobs.local import launcher as local
from jobs.local import processes
from tests import command_line

INTERVAL_S = 0.05
LOST_AFTER_S = 0.3
WAIT_S = 30
# Measured: both training tasks exit about 20 s (PEER_LOST_AFTER_S) after
# their parameter server was killed.
PS_DEATH_BOUND_S = watchdog.PEER_LOST_AFTER_S + 30


class PeerWatchdogTest(tf.test.TestCase):

    def listener(self):
        server = socket.socket()
        server.bind(("localhost", 0))
        server.listen()
        self.addCleanup(server.close)
        return server, "localhost:%d" % server.getsockname()[1]

    def watch(self, peers, lost_after_s=LOST_AFTER_S, stopping=lambda: False):
        lost = []
        event = threading.Event()

        def on_lost(name, address, reason):
            lost.append((name, address, reason))
            event.set()
        dog = watchdog.PeerWatchdog(peers, lost_after_s=lost_after_s, interval_s=INTERVAL_S, on_lost=on_lost,
                                    stopping=stopping).start()
        self.addCleanup(dog.stop)
        return dog, lost, event

    def test_a_peer_refusing_connections_while_the_task_stops_is_lost_at_once(self):
        server, address = self.listener()
        stopping = threading.Event()
        # A patience no test waits out: only the stop can make the peer lost within WAIT_S.
        dog, lost, event = self.watch({"ps_0": address}, lost_after_s=10 * WAIT_S, stopping=stopping.is_set)
        time.sleep(5 * INTERVAL_S)
        server.close()
        time.sleep(5 * INTERVAL_S)
        self.assertEmpty(lost)
        stopping.set()
        self.assertTrue(event.wait(WAIT_S))
        self.assertIn("refuses connections while this task stops", lost[0][2])
        self.assertEqual(dog.lost, "ps_0")

    def test_a_peer_that_goes_away_is_reported_by_name(self):
        server, address = self.listener()
        dog, lost, event = self.watch({"ps_0": address})
        time.sleep(5 * INTERVAL_S)
        self.assertEmpty(lost)
        start = time.monotonic()
        server.close()
        self.assertTrue(event.wait(WAIT_S))
        # Last seen at most one interval before the close.
        self.assertGreaterEqual(time.monotonic() - start, LOST_AFTER_S - 2 * INTERVAL_S)
        name, reported, reason = lost[0]
        self.assertEqual((name, reported), ("ps_0", address))
        self.assertIn("unreachable for", reason)
        self.assertEqual(dog.lost, "ps_0")

    def test_a_peer_never_seen_is_left_to_tensorflow(self):
        _, address = self.listener()
        never = socket.socket()
        never.bind(("localhost", 0))
        closed = "localhost:%d" % never.getsockname()[1]
        never.close()
        _, lost, event = self.watch({"ps_0": address, "ps_1": closed})
        self.assertFalse(event.wait(10 * LOST_AFTER_S))
        self.assertEmpty(lost)

    def test_no_peers_nothing_watched(self):
        with watchdog.watch_peers({}) as watching:
            self.assertIsNone(watching)


@pytest.mark.slow
class DeadParameterServerTest(tf.test.TestCase):
    """A real cluster without a launcher: its training tasks end by themselves when the ps dies."""

    def test_training_tasks_exit_naming_the_ps(self):
        root = self.create_tempdir().full_path
        data_dir = os.path.join(root, "data")
        synthetic.generate(3000, data_dir, feature_size=1000, seed=3)
        log_dir = os.path.join(root, "logs")
        model_dir = os.path.join(root, "model")
        config = local.LaunchConfig(strategy="ps", log_dir=log_dir, num_ps=1, num_workers=2)
        train_args = ["--train_data", data_dir, "--model_dir", model_dir, "--max_steps", "1000000",
                      "--batch_size", "64", "--embedding_size", "4", "--deep_layers", "8", "--dropout", "0",
                      "--save_checkpoints_steps", "50"]
        # The tasks get the environment of a user's shell, as the launcher started from one passes on.
        specs = local.ps_tasks(config, train_args, processes.free_ports(3), command_line.environment())
        group = processes.ProcessGroup(log_dir, stop_grace_seconds=2)
        self.addCleanup(group.stop)
        tasks = {spec.name: group.start(spec.name, spec.argv, env=spec.env, service=spec.service) for spec in specs}
        deadline = time.monotonic() + 240
        while len(glob.glob(os.path.join(model_dir, "model.ckpt-*.index"))) < 2:
            self.assertLess(time.monotonic(), deadline, "no training progress")
            time.sleep(0.2)
        os.kill(tasks["ps_0"].pid, signal.SIGKILL)
        start = time.monotonic()
        for name in ("chief_0", "worker_0"):
            tasks[name].process.wait(max(1.0, PS_DEATH_BOUND_S - (time.monotonic() - start)))
            self.assertEqual(tasks[name].poll(), watchdog.PEER_LOST_EXIT_CODE)
            self.assertRegex(processes.log_tail(tasks[name].log_path, 50),
                             r"parameter server ps_0 at localhost:\d+ is gone")
        self.assertLess(time.monotonic() - start, PS_DEATH_BOUND_S)


if __name__ == "__main__":
    tf.test.main()
