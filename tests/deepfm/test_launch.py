"""Tests of `deepfm.launch`: `--np 0`'s ranks and threads from a host's cores; a refused job leaves nothing; a
task killed for its host's memory limit is reported as such."""

import os
import subprocess

import pytest
import tensorflow as tf

from dataprep import synthetic
from deepfm import launch
from jobs.local import memory
from planner import cost_model, layouts
from strategies import strategy_names as names
from tests import command_line


class RanksFromCoresTest(tf.test.TestCase):

    def test_the_layout_rules_ranks_and_their_threads(self):
        for controller, transport in (("gloo", cost_model.GLOO), ("mpi", cost_model.MPI)):
            ranks, train_args, reason = launch.ranks_from_cores(names.HYBRID, ["--train_data", "d"], vcpus=16,
                                                                cores=16, controller=controller)
            expected = layouts.for_host(names.HYBRID, 16, transport=transport)
            self.assertEqual(expected.ranks_per_host, ranks)
            self.assertEqual(["--train_data", "d"] + expected.thread_flags(), train_args)
            self.assertEqual(expected.reason, reason)
        # The costs over MPI with yielding waits are lower: the same layout predicts more examples/sec.
        gloo = layouts.for_host(names.HYBRID, 16, transport=cost_model.GLOO).prediction
        mpi = layouts.for_host(names.HYBRID, 16, transport=cost_model.MPI).prediction
        self.assertGreater(mpi.efficiency, gloo.efficiency)

    def test_threads_the_user_set_are_kept(self):
        _, train_args, _ = launch.ranks_from_cores(names.HOROVOD, ["--intra_op_threads=3"], vcpus=16, cores=16)
        self.assertEqual(["--intra_op_threads=3"], train_args)
        _, train_args, _ = launch.ranks_from_cores(names.HOROVOD, ["--inter_op_threads", "2"], vcpus=16, cores=16)
        self.assertEqual(["--inter_op_threads", "2"], train_args)

    def test_hyperthreads_go_to_the_ranks_of_their_cores(self):
        ranks, train_args, _ = launch.ranks_from_cores(names.HYBRID, [], vcpus=16, cores=8)
        self.assertEqual(layouts.for_host(names.HYBRID, 16, cores=8).ranks_per_host, ranks)
        self.assertIn("--intra_op_threads=%d" % (16 // ranks), train_args)

    def test_only_horovod_ranks(self):
        with self.assertRaisesRegex(ValueError, "--strategy ps takes --num_workers"):
            launch.ranks_from_cores(names.PS, [], vcpus=4, cores=4)


class RefusedJobTest(tf.test.TestCase):

    def test_a_refused_job_leaves_no_log_directory_behind(self):
        tmp = self.create_tempdir().full_path
        work = self.create_tempdir().full_path
        for flags in (["--strategy", "ps", "--num_ps", "0"],  # refused by the launch's config
                      ["--strategy", "horovod", "--np", "2", "--", "--train_data", "data"]):  # no --model_dir
            result = command_line.run(command_line.python_module("deepfm.launch", *flags), work,
                                      env={"TMPDIR": tmp}, timeout=120)
            self.assertEqual(1, result.returncode, command_line.describe(flags, result))
            self.assertIn("deepfm.launch: error:", result.stderr)
            self.assertEqual([], command_line.left_in(tmp), flags)
        # With --log_dir, the user's directory stays.
        given = os.path.join(work, "logs")
        os.makedirs(given)
        command_line.run(command_line.python_module("deepfm.launch", "--strategy", "ps", "--num_ps", "0",
                                                    "--log_dir", given), work, env={"TMPDIR": tmp}, timeout=120)
        self.assertTrue(os.path.isdir(given))

    def test_a_bad_host_memory_is_refused_with_the_value(self):
        work = self.create_tempdir().full_path
        flags = ["--strategy", "ps", "--host_memory", "lots", "--", "--train_data", "data", "--model_dir", "m"]
        result = command_line.run(command_line.python_module("deepfm.launch", *flags), work, timeout=120)
        self.assertEqual(1, result.returncode, command_line.describe(flags, result))
        self.assertIn("deepfm.launch: error: --host_memory 'lots' is not a size: give bytes", result.stderr)
        self.assertIn("6g, 6GiB, 6500m", result.stderr)


# A host limit below what one TensorFlow process needs: the job's first task to import it is killed.
TINY_HOST_MEMORY = "200m"
MEMORY_JOB_TIMEOUT_S = 240


@pytest.mark.slow
class HostMemoryTest(tf.test.TestCase):
    """`python -m deepfm.launch --host_memory`: a real job on a host too small for it."""

    def test_a_task_killed_for_memory_is_reported_with_its_peak_and_the_limit(self):
        try:
            controller = memory.find_controller()
        except memory.MemoryLimitError as e:
            self.skipTest("memory cgroups cannot be made here: %s" % e)
        work = self.create_tempdir().full_path
        synthetic.generate(1000, os.path.join(work, "data"), feature_size=1000, seed=3)
        argv = command_line.python_module(
            "deepfm.launch", "--strategy", "ps", "--num_ps", "1", "--num_workers", "1",
            "--host_memory", TINY_HOST_MEMORY, "--log_dir", "logs", "--",
            "--train_data", "data", "--model_dir", "runs/m", "--max_steps", "5", "--batch_size", "32",
            "--embedding_size", "4", "--deep_layers", "8")
        process = command_line.start(argv, work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.addCleanup(command_line.kill_group, process)
        output, _ = process.communicate(timeout=MEMORY_JOB_TIMEOUT_S)
        self.assertEqual(launch.local.EXIT_FAILURE, process.returncode, output)
        self.assertRegex(output, r"launch failed: task (ps_0|chief_0) was killed for memory \(exit code -9 \(killed "
                                 r"by SIGKILL\)\): host localhost's processes peaked at \d+ MiB against its limit of "
                                 r"200 MiB \(200m\)( \(\d+ processes killed\))?; raise --host_memory, or use more "
                                 r"hosts")
        # The job's cgroup (named after the launcher's pid) is gone.
        owned = "%s-%d-" % (memory.CGROUP_PREFIX, process.pid)
        self.assertEqual([], [name for name in os.listdir(controller.parent) if name.startswith(owned)])


if __name__ == "__main__":
    tf.test.main()
