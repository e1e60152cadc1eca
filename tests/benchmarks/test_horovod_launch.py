"""`python -m benchmarks.horovod_launch`: both launchers start real ranks, and the run is reported."""

import json
import os
import sys

import pytest
import tensorflow as tf

from benchmarks import horovod_launch as bench
from tests import command_line


class ConfigTest(tf.test.TestCase):

    def test_bad_values_are_refused_naming_them(self):
        with self.assertRaisesRegex(ValueError, "--ranks must be >= 1, got 0"):
            bench.HorovodLaunchConfig(ranks=0)
        with self.assertRaisesRegex(ValueError, "--one must be one of horovodrun_gloo, runner_gloo, horovodrun_mpi, "
                                                "runner_mpi, got 'bogus'"):
            bench.HorovodLaunchConfig(one="bogus")

    def test_both_launchers_get_the_same_arguments(self):
        installed, runner = (bench.launch_command(name, 3, python="/venv/bin/python")
                             for name in ("horovodrun_mpi", "runner_mpi"))
        self.assertEqual(["/venv/bin/horovodrun"], installed[:1])
        self.assertEqual(["/venv/bin/python", "-m", "jobs.local.horovod_runner"], runner[:3])
        self.assertEqual(installed[1:], runner[3:])
        self.assertEqual(["--mpi", "--mpi-args=-mca mpi_yield_when_idle 1", "-np", "3", "-H", "localhost:3",
                          "/venv/bin/python", "-c", "pass"], runner[3:])
        self.assertEqual(["horovodrun_gloo", "runner_gloo"], bench.variant_names(with_mpi=False))


@pytest.mark.slow
class TrialRunTest(tf.test.TestCase):

    def test_a_trial_run_measures_both_launchers_and_leaves_the_committed_results_alone(self):
        if not os.access(os.path.join(os.path.dirname(sys.executable), "horovodrun"), os.X_OK):
            self.skipTest("no horovodrun beside %s" % sys.executable)
        # A directory like the project's root, with benchmarks/results/ of its own (the default).
        cwd = command_line.checkout(self.create_tempdir().full_path)
        variants = ["horovodrun_gloo", "runner_gloo"]
        command = command_line.python_module("benchmarks.horovod_launch", "--rounds", "1", "--variants",
                                             ",".join(variants), "--results_dir", "runs/trial")
        result = command_line.run(command, cwd, timeout=300)
        self.assertEqual(0, result.returncode, command_line.describe(command, result))
        with open(os.path.join(cwd, "runs", "trial", "horovod_launch.json")) as f:
            report = json.load(f)
        for variant in variants:
            for metric in bench.METRICS:
                self.assertLen(report["results"][variant][metric], 1)
                self.assertGreater(report["results"][variant][metric][0], 0)
        # The check the runner leaves out imports TensorFlow: the installed launcher's largest process is it.
        self.assertGreater(report["results"]["horovodrun_gloo"]["peak_rss_mb"][0],
                           report["results"]["runner_gloo"]["peak_rss_mb"][0])
        with open(os.path.join(cwd, "runs", "trial", "horovod_launch.md")) as f:
            self.assertIn("Launches of 2 ranks that do nothing", f.read())
        self.assertEqual([], os.listdir(os.path.join(cwd, "benchmarks", "results")))


if __name__ == "__main__":
    tf.test.main()
