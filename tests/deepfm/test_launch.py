"""Tests of deepfm.launch: the commands it builds and real supervised jobs.

The slow tests run `python -m deepfm.launch` on a real gRPC cluster (or real
Horovod ranks) on localhost and check that a failure or a signal stops
every process it started.
"""

import glob
import json
import os
import signal
import subprocess
import sys

import pytest
import tensorflow as tf
from absl.testing import parameterized

import strategies
from deepfm import launch
from input_pipeline import synthetic
from strategies import cluster as cluster_lib
from tests.deepfm import launch_testing

FEATURE_SIZE = 1000
TRAIN_FLAGS = ["--batch_size", "64", "--embedding_size", "4", "--deep_layers", "8", "--dropout", "0"]
# A step budget no test reaches: the job ends only by the failure under test.
ENDLESS_STEPS = "1000000"
# Logged by the throughput hook every --log_every_n_steps steps of training.
TRAINING = "examples/sec"


class CommandsTest(tf.test.TestCase, parameterized.TestCase):

    def test_ps_tasks(self):
        config = launch.LaunchConfig(strategy="ps", num_ps=2, num_workers=3, log_dir=self.get_temp_dir())
        train_args = ["--model_dir", "/m", "--metrics_file=/x.json"]
        specs = launch.ps_tasks(config, train_args, ports=[11, 12, 13, 14, 15],
                                environ={"PATH": "/bin", "TF_CONFIG": "stale"}, python="/venv/bin/python")
        self.assertEqual([s.name for s in specs], ["ps_0", "ps_1", "chief_0", "worker_0", "worker_1"])
        self.assertEqual([s.service for s in specs], [True, True, False, False, False])
        expected_jobs = {"chief": ("localhost:11",), "worker": ("localhost:12", "localhost:13"),
                         "ps": ("localhost:14", "localhost:15")}
        for spec in specs:
            self.assertEqual(spec.argv, ["/venv/bin/python", "-m", "deepfm.train", "--strategy", "ps"] + train_args)
            info = cluster_lib.from_environment(spec.env)
            self.assertEqual(info.task_name, spec.name)
            self.assertEqual(dict(info.jobs), expected_jobs)
            self.assertEqual(spec.env["PATH"], "/bin")
            self.assertEqual(spec.env["PYTHONUNBUFFERED"], "1")
            self.assertIn(launch_testing.REPO_ROOT, spec.env["PYTHONPATH"].split(os.pathsep))
            self.assertEqual(spec.env.get("CUDA_VISIBLE_DEVICES"), "" if info.is_ps else None)

    def test_horovod_task(self):
        config = launch.LaunchConfig(strategy="horovod", num_processes=3, log_dir="/logs", controller="gloo")
        spec = launch.horovod_task(config, ["--model_dir=/m"], environ={"TF_CONFIG": "{}"})
        horovodrun = os.path.join(os.path.dirname(sys.executable), "horovodrun")
        self.assertEqual(spec.argv, [horovodrun, "--gloo", "-np", "3", "-H", "localhost:3",
                                     "--output-filename", "/logs/ranks",
                                     sys.executable, "-m", "deepfm.train", "--strategy", "horovod", "--model_dir=/m"])
        self.assertNotIn("TF_CONFIG", spec.env)
        self.assertFalse(spec.service)

    def test_controller(self):
        self.assertEqual(launch.horovod_controller_args("mpi"), ["--mpi"])
        self.assertEqual(launch.horovod_controller_args("gloo"), ["--gloo"])
        bin_dir = self.create_tempdir().full_path
        path = os.environ.get("PATH", "")
        self.addCleanup(os.environ.__setitem__, "PATH", path)
        os.environ["PATH"] = bin_dir
        self.assertEqual(launch.horovod_controller_args("auto"), ["--gloo"])
        mpirun = os.path.join(bin_dir, launch.MPIRUN)
        with open(mpirun, "w") as f:
            f.write("#!/bin/sh\n")
        os.chmod(mpirun, 0o755)
        # With mpirun installed, horovodrun picks MPI if it was built with it.
        self.assertEqual(launch.horovod_controller_args("auto"), [])

    @parameterized.parameters("--strategy", "--strategy=single", "-strategy=ps")
    def test_reserved_train_flags(self, flag):
        with self.assertRaisesRegex(ValueError, "the launcher sets --strategy itself"):
            launch.check_train_args(["--model_dir=/m", flag])

    @parameterized.named_parameters(
        ("strategy", {"strategy": "mirrored"}, "--strategy must be one of ps, horovod, got 'mirrored'"),
        ("num_ps", {"num_ps": 0}, "--num_ps must be >= 1, got 0"),
        ("num_workers", {"num_workers": 0}, "--num_workers must be >= 1, got 0"),
        ("np", {"num_processes": -1}, "--np must be >= 1, got -1"),
        ("controller", {"controller": "ssh"}, "--horovod_controller must be one of auto, gloo, mpi, got 'ssh'"),
        ("timeout", {"timeout_s": -1}, "--timeout_s must be >= 0, got -1"),
    )
    def test_bad_config(self, options, message):
        options = dict(dict(strategy="ps", log_dir="/logs"), **options)
        with self.assertRaisesRegex(ValueError, message):
            launch.LaunchConfig(**options)

    def test_usage_error_from_the_command_line(self):
        result = subprocess.run(
            [sys.executable, "-m", "deepfm.launch", "--strategy", "ps", "--num_ps", "0", "--", "--model_dir=/m"],
            cwd=launch_testing.REPO_ROOT, capture_output=True, text=True, timeout=120,
            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("--num_ps must be >= 1, got 0", result.stderr)


def tiny_dataset(test_case):
    root = test_case.create_tempdir("data").full_path
    synthetic.generate(3000, root, feature_size=FEATURE_SIZE, seed=3)
    return root


@pytest.mark.slow
class SupervisionTest(tf.test.TestCase):
    """A real parameter-server job: a failure or a signal leaves no process behind."""

    def start_endless_job(self):
        work = self.create_tempdir("run").full_path
        job = launch_testing.LaunchedJob(
            self, ["--strategy", "ps", "--num_ps", "1", "--num_workers", "2"], os.path.join(work, "logs"),
            ["--train_data", tiny_dataset(self), "--model_dir", os.path.join(work, "model"),
             "--max_steps", ENDLESS_STEPS, "--log_every_n_steps", "10"] + TRAIN_FLAGS)
        return job

    def test_killed_worker_fails_the_job_and_stops_everything(self):
        job = self.start_endless_job()
        self.assertTrue(job.wait_for_log("worker_0", TRAINING), job.output())
        os.kill(job.task_pids()["worker_0"], signal.SIGKILL)
        returncode, output = job.wait()
        self.assertEqual(returncode, launch.EXIT_FAILURE, output)
        self.assertRegex(output, r"launch failed: task worker_0 failed with exit code -9 \(killed by SIGKILL\); "
                                 r"last lines of .*worker_0\.log")
        last_line = job.log("worker_0").strip().splitlines()[-1]
        self.assertIn(last_line, output)  # the tail of the log
        self.assertEqual(sorted(job.task_pids()), ["chief_0", "ps_0", "worker_0"])
        job.assert_no_process_left()

    def test_sigterm_stops_everything(self):
        job = self.start_endless_job()
        self.assertTrue(job.wait_for_log("chief_0", TRAINING), job.output())
        job.process.send_signal(signal.SIGTERM)
        returncode, output = job.wait()
        self.assertEqual(returncode, 128 + signal.SIGTERM, output)
        self.assertIn("launch stopped by SIGTERM; every task was stopped", output)
        job.assert_no_process_left()


@pytest.mark.slow
class HorovodLaunchTest(tf.test.TestCase):

    def test_two_ranks(self):
        if "horovod" not in strategies.names():
            self.skipTest("the horovod strategy is not registered")
        work = self.create_tempdir("run").full_path
        metrics_file = os.path.join(work, "metrics.json")
        export_dir = os.path.join(work, "export")
        job = launch_testing.LaunchedJob(
            self, ["--strategy", "horovod", "--np", "2"], os.path.join(work, "logs"),
            ["--train_data", tiny_dataset(self), "--model_dir", os.path.join(work, "model"),
             "--metrics_file", metrics_file, "--export_dir", export_dir, "--num_epochs", "2",
             "--learning_rate", "0.01"] + TRAIN_FLAGS)
        returncode, output = job.wait()
        self.assertEqual(returncode, 0, output + job.log(launch.HOROVOD_TASK))
        job.assert_no_process_left()
        with open(metrics_file) as f:
            metrics = json.load(f)
        self.assertGreater(metrics["auc"], 0.6, metrics)
        self.assertLen(glob.glob(os.path.join(export_dir, "*", "saved_model.pb")), 1)
        rank_logs = glob.glob(os.path.join(work, "logs", launch.HOROVOD_RANK_LOGS, "rank.*"))
        self.assertLen(rank_logs, 2)


if __name__ == "__main__":
    tf.test.main()
