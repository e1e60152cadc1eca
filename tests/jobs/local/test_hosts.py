"""Tests of jobs.local.hosts: emulated hosts in network namespaces (root needed; skipped with the reason otherwise)."""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from unittest import mock

import tensorflow as tf
from absl.testing import parameterized

from jobs.local import hosts
from tests import command_line

SERVER = """
import socket, sys
sock = socket.socket(); sock.bind(("0.0.0.0", 2222)); sock.listen(1)
print("ready", flush=True)
conn, address = sock.accept(); conn.sendall(socket.gethostname().encode()); conn.close()
"""
CLIENT = """
import json, os, socket
sock = socket.create_connection(("algo-2", 2222), timeout=20)
print(json.dumps({"peer": sock.recv(64).decode(), "address": socket.gethostbyname("algo-2"),
                  "me": socket.gethostname(), "cpus": sorted(os.sched_getaffinity(0)), "pid": os.getpid()}))
"""


def namespaces_of_this_process():
    prefix = "%s-%d-" % (hosts.NAMESPACE_PREFIX, os.getpid())
    return [name for name in hosts.list_namespaces() if name.startswith(prefix)]


class AssignCpusTest(parameterized.TestCase):

    def test_consecutive_blocks(self):
        self.assertEqual([(0, 1), (2, 3)], hosts.assign_cpus(2, 2, available=[0, 1, 2, 3]))
        self.assertEqual([(), ()], hosts.assign_cpus(2, 0, available=[0]))

    def test_too_many_cores_names_both_counts(self):
        with self.assertRaisesRegex(ValueError, "3 host\\(s\\) x --cpus_per_host 1 need 3 cores; this machine has 2"):
            hosts.assign_cpus(3, 1, available=[0, 1])

    def test_without_root_the_error_says_so(self):
        with mock.patch.object(hosts.os, "geteuid", return_value=1000):
            self.assertIn("need root", hosts.check_privileges())
            with self.assertRaisesRegex(hosts.HostSetupError, "need root"):
                hosts.HostNetwork(["algo-1"])


class CheckInterpreterTest(parameterized.TestCase):

    @parameterized.named_parameters(
        ("virtual_environment", "/tmp/venv/bin/python", "the interpreter, /tmp/venv/bin/python, is under /tmp"),
        ("opt_ml", "/opt/ml/code/python", "the interpreter, /opt/ml/code/python, is under /opt/ml"),
    )
    def test_an_interpreter_the_hosts_cannot_see_is_refused_with_the_remedy(self, python, message):
        with self.assertRaisesRegex(hosts.HostSetupError, message + ".*replaces with its own.*outside /tmp"):
            hosts.check_interpreter(python)

    def test_the_file_an_interpreter_resolves_to_counts(self):
        directory = tempfile.mkdtemp(dir=os.path.expanduser("~"))  # not under /tmp
        self.addCleanup(shutil.rmtree, directory)
        link = os.path.join(directory, "python")
        os.symlink("/tmp/base/bin/python3", link)
        with self.assertRaisesRegex(hosts.HostSetupError, "the interpreter's file, /tmp/base/bin/python3"):
            hosts.check_interpreter(link)

    def test_this_interpreter_is_visible_where_it_is_not_under_tmp(self):
        if any(p.startswith("/tmp/") for p in (sys.executable, os.path.realpath(sys.executable), sys.prefix)):
            self.skipTest("this test's own interpreter is under /tmp: %s" % sys.executable)
        for python in (sys.executable, "/usr/bin/python3"):
            self.assertIsNone(hosts.check_interpreter(python))
            # The same check refuses it where its own directory would be a host's.
            own = os.path.dirname(os.path.realpath(python))
            with self.assertRaisesRegex(hosts.HostSetupError, "is under %s, which every emulated host replaces"
                                        % re.escape(own)):
                hosts.check_interpreter(python, private_dirs=(own,))


class HostNetworkTest(tf.test.TestCase):

    def setUp(self):
        super().setUp()
        reason = hosts.check_privileges()
        if reason:
            self.skipTest(reason)

    def run_in(self, network, host, code, spec_dir, cpus=()):
        spec = hosts.InitSpec(hostname=host.name, argv=(sys.executable, "-c", code), env=command_line.environment(),
                              cpus=cpus or host.cpus)
        path = spec.write(os.path.join(spec_dir, host.name + ".json"))
        return subprocess.Popen(network.command(host, path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)

    def test_hosts_reach_each_other_by_name_with_their_own_names_and_cores(self):
        spec_dir = self.get_temp_dir()
        cores = sorted(os.sched_getaffinity(0))
        with hosts.HostNetwork(["algo-1", "algo-2"], cpus=[(cores[0],), (cores[-1],)]) as network:
            server = self.run_in(network, network.host("algo-2"), SERVER, spec_dir)
            self.assertEqual("ready", server.stdout.readline().strip())
            client = self.run_in(network, network.host("algo-1"), CLIENT, spec_dir)
            out, err = client.communicate(timeout=60)
            self.assertEqual(0, client.returncode, err)
            server.wait(timeout=30)
            result = json.loads(out)
            self.assertEqual("algo-2", result["peer"])
            self.assertEqual("algo-1", result["me"])
            self.assertEqual(network.host("algo-2").address, result["address"])
            self.assertEqual([cores[0]], result["cpus"])
            self.assertEqual(2, result["pid"])  # the host's own PID namespace: init is 1, its command 2
            self.assertLen(namespaces_of_this_process(), 3)
            self.assertTrue(os.path.isfile(os.path.join(network.etc_dir(network.host("algo-1")), "hosts")))
            etc = network.etc_dir(network.host("algo-1"))
        self.assertEqual([], namespaces_of_this_process())
        self.assertFalse(os.path.exists(etc))

    def test_close_kills_whatever_runs_in_the_hosts(self):
        spec_dir = self.get_temp_dir()
        network = hosts.HostNetwork(["algo-1"])
        try:
            sleeper = self.run_in(network, network.host("algo-1"), "import time; time.sleep(600)", spec_dir)
            for _ in range(100):
                if len(network.pids(network.host("algo-1"))) >= 2:
                    break
                sleeper.poll()
                subprocess.run(["sleep", "0.1"], check=True)
            self.assertGreaterEqual(len(network.pids(network.host("algo-1"))), 2)
        finally:
            network.close()
        self.assertIsNotNone(sleeper.wait(timeout=30))
        self.assertEqual([], namespaces_of_this_process())

    def test_link_model_limits_bandwidth_with_a_token_bucket(self):
        with hosts.HostNetwork(["algo-1", "algo-2"], link=hosts.LinkModel(gbps=10)) as network:
            shown = subprocess.run(["ip", "netns", "exec", network.host("algo-1").namespace, "tc", "qdisc", "show",
                                    "dev", network.interface], capture_output=True, text=True, check=True).stdout
        self.assertIn("tbf", shown)
        self.assertIn("10Gbit", shown)

    def test_stale_namespaces_of_dead_owners_are_removed(self):
        dead = subprocess.Popen(["true"])
        dead.wait()
        name = "%s-%d-0-algo-1" % (hosts.NAMESPACE_PREFIX, dead.pid)
        subprocess.run(["ip", "netns", "add", name], check=True)
        try:
            self.assertIn(name, hosts.remove_stale_namespaces())
            self.assertNotIn(name, hosts.list_namespaces())
        finally:
            subprocess.run(["ip", "netns", "delete", name], capture_output=True)


if __name__ == "__main__":
    tf.test.main()
