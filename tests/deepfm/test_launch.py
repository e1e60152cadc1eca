"""Tests of `deepfm.launch`: `--np 0`'s ranks and threads from a host's cores; a refused job leaves nothing."""

import os

import tensorflow as tf

from deepfm import launch
from strategies import cost_model, host_layout
from strategies import strategy_names as names
from tests import command_line


class RanksFromCoresTest(tf.test.TestCase):

    def test_the_layout_rules_ranks_and_their_threads(self):
        for controller, transport in (("gloo", cost_model.GLOO), ("mpi", cost_model.MPI)):
            ranks, train_args, reason = launch.ranks_from_cores(names.HYBRID, ["--train_data", "d"], vcpus=16,
                                                                cores=16, controller=controller)
            expected = host_layout.for_host(names.HYBRID, 16, transport=transport)
            self.assertEqual(expected.ranks_per_host, ranks)
            self.assertEqual(["--train_data", "d"] + expected.thread_flags(), train_args)
            self.assertEqual(expected.reason, reason)
        # The costs over MPI with yielding waits are lower: the same layout predicts more examples/sec.
        gloo = host_layout.for_host(names.HYBRID, 16, transport=cost_model.GLOO).prediction
        mpi = host_layout.for_host(names.HYBRID, 16, transport=cost_model.MPI).prediction
        self.assertGreater(mpi.efficiency, gloo.efficiency)

    def test_threads_the_user_set_are_kept(self):
        _, train_args, _ = launch.ranks_from_cores(names.HOROVOD, ["--intra_op_threads=3"], vcpus=16, cores=16)
        self.assertEqual(["--intra_op_threads=3"], train_args)
        _, train_args, _ = launch.ranks_from_cores(names.HOROVOD, ["--inter_op_threads", "2"], vcpus=16, cores=16)
        self.assertEqual(["--inter_op_threads", "2"], train_args)

    def test_hyperthreads_go_to_the_ranks_of_their_cores(self):
        ranks, train_args, _ = launch.ranks_from_cores(names.HYBRID, [], vcpus=16, cores=8)
        self.assertEqual(host_layout.for_host(names.HYBRID, 16, cores=8).ranks_per_host, ranks)
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


if __name__ == "__main__":
    tf.test.main()
