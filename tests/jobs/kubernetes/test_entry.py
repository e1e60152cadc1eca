"""The training containers' entry point: TF_CONFIG of a JobSet pod, signals, exit codes."""

import json
import signal
import subprocess
import tempfile
import time
import unittest

from jobs.kubernetes import entry as kubernetes_entry
from tests import command_line

CLUSTER = {"chief": ["js-chief-0-0.js:2222"], "worker": ["js-worker-0-0.js:2222", "js-worker-0-1.js:2222"],
           "ps": ["js-ps-0-0.js:2222"]}


def entry(*command, env=None):
    """A pod's command (`python -m jobs.kubernetes.entry -- command...`) and the variables the pod sets."""
    return command_line.python_module("jobs.kubernetes.entry", "--", *command), env


def run(argv, env):
    return command_line.run(argv, tempfile.gettempdir(), env=env, timeout=120)


class ExitCodeTest(unittest.TestCase):

    def test_the_codes_are_trainings(self):
        from deepfm.runtime import (
            interrupt,  # imports TensorFlow
            watchdog,  # imports TensorFlow
        )
        self.assertEqual(interrupt.INTERRUPTED_EXIT_CODE, kubernetes_entry.INTERRUPTED_EXIT_CODE)
        self.assertEqual(watchdog.PEER_LOST_EXIT_CODE, kubernetes_entry.PEER_LOST_EXIT_CODE)

    def test_retryable_codes_move_to_the_operators_retryable_range(self):
        self.assertEqual(203, kubernetes_entry.pod_exit_code(75))
        self.assertEqual(197, kubernetes_entry.pod_exit_code(69))
        self.assertEqual(137, kubernetes_entry.pod_exit_code(-signal.SIGKILL))
        for permanent in (0, 1, 2, 125):
            self.assertEqual(permanent, kubernetes_entry.pod_exit_code(permanent))
        self.assertEqual((137, 143, 197, 203), kubernetes_entry.RETRYABLE_POD_EXIT_CODES)

    def test_a_real_child(self):
        for code, expected in ((75, 203), (1, 1), (0, 0)):
            argv, env = entry("python", "-c", "import sys; sys.exit(%d)" % code)
            self.assertEqual(expected, run(argv, env).returncode)

    def test_sigterm_reaches_the_child(self):
        script = ("import signal, sys, time\n"
                  "signal.signal(signal.SIGTERM, lambda *a: sys.exit(75))\n"
                  "print('ready', flush=True)\ntime.sleep(60)\n")
        argv, env = entry("python", "-c", script)
        process = command_line.start(argv, tempfile.gettempdir(), env=env, stdout=subprocess.PIPE, text=True)
        self.addCleanup(command_line.kill_group, process)
        self.assertEqual("ready", process.stdout.readline().strip())
        start = time.monotonic()
        process.send_signal(signal.SIGTERM)
        self.assertEqual(203, process.wait(timeout=30))
        self.assertLess(time.monotonic() - start, 30)
        process.stdout.close()


class TFConfigTest(unittest.TestCase):

    def test_from_a_jobset_pods_environment(self):
        environ = {kubernetes_entry.CLUSTER_VARIABLE: json.dumps(CLUSTER),
                   kubernetes_entry.TASK_TYPE_VARIABLE: "worker", kubernetes_entry.INDEX_VARIABLE: "1"}
        config = json.loads(kubernetes_entry.tf_config(environ))
        self.assertEqual({"cluster": CLUSTER, "task": {"type": "worker", "index": 1}}, config)
        argv, env = entry("python", "-c", "import os; print(os.environ['TF_CONFIG'])", env=environ)
        printed = run(argv, env).stdout
        self.assertEqual(config, json.loads(printed))

    def test_an_operators_tf_config_is_kept(self):
        self.assertIsNone(kubernetes_entry.tf_config({"TF_CONFIG": "{}", kubernetes_entry.CLUSTER_VARIABLE: "{}"}))
        self.assertIsNone(kubernetes_entry.tf_config({}))

    def test_bad_environments_are_named(self):
        base = {kubernetes_entry.CLUSTER_VARIABLE: json.dumps(CLUSTER)}
        for extra, message in (({kubernetes_entry.TASK_TYPE_VARIABLE: "evaluator"}, "DEEPFM_TF_TASK_TYPE"),
                               ({kubernetes_entry.TASK_TYPE_VARIABLE: "ps", "JOB_COMPLETION_INDEX": "1"},
                                "JOB_COMPLETION_INDEX"),
                               ({kubernetes_entry.CLUSTER_VARIABLE: "{"}, "not JSON")):
            with self.subTest(message), self.assertRaisesRegex(ValueError, message):
                kubernetes_entry.tf_config(dict(base, **extra))
        argv, env = entry("true", env=dict(base, DEEPFM_TF_TASK_TYPE="evaluator"))
        result = run(argv, env)
        self.assertEqual(kubernetes_entry.EXIT_USAGE, result.returncode)
        self.assertIn("DEEPFM_TF_TASK_TYPE", result.stderr)


if __name__ == "__main__":
    unittest.main()
