"""`python -m deepfm.advise` on tiny data: the step measured, costs fitted and checked, a pick."""

import os

import pytest
import tensorflow as tf

from dataprep import synthetic
from tests import command_line
from tests.planner import test_benchmark_fit as fit_tests


@pytest.mark.slow
class CommandLineTest(fit_tests.ResultsTestCase):
    """`python -m deepfm.advise --fit_to A,B --check_against A,B` on tiny data: runs at its batch and another."""

    def test_fits_to_and_checks_runs_at_another_batch(self):
        data = self.create_tempdir().full_path
        synthetic.generate(3000, data, feature_size=2000, seed=0)
        paths = ",".join([self._results(fit_tests.SMALL_BATCH), self._results(1024)])
        command = command_line.python_module(
            "deepfm.advise", "--data", data, "--batch_size", str(fit_tests.SMALL_BATCH), "--steps", "2",
            "--warmup_steps", "2",
            "--fit_to", paths, "--check_against", paths)
        proc = command_line.run(command, self.get_temp_dir(), timeout=300)
        self.assertEqual(0, proc.returncode, command_line.describe(command, proc))
        self.assertIn("hybrid costs (fitted to scale_out_256.json, scale_out_1024.json)", proc.stdout)
        for batch in ("256", "1,024"):
            self.assertRegex(proc.stdout, r"\| scale_out_%s \| %s \| hybrid\+fp16 \| 2x1x1 \| [\d,]+ \| 10,000 \|"
                             % (batch.replace(",", ""), batch))
        self.assertIn("pick: ", proc.stdout)
        # Horovod's ranks over MPI by default, and the costs over MPI named with the runs they were fitted to.
        self.assertIn("Horovod over mpi", proc.stdout)
        self.assertIn("hybrid@mpi costs (fitted to scale_out_1024_mpi.json, scale_out_1024_horovod_mpi.json, "
                      "scale_out_8192_distinct_clip.json)", proc.stdout)

    def test_a_batch_larger_than_the_data_is_named(self):
        cwd = self.get_temp_dir()
        synthetic.generate(300, os.path.join(cwd, "data", "tiny"), feature_size=2000, seed=0)
        command = command_line.python_module("deepfm.advise", "--data", "data/tiny", "--batch_size", "1024",
                                             "--steps", "2", "--warmup_steps", "2")
        proc = command_line.run(command, cwd, timeout=300)
        self.assertEqual(1, proc.returncode, command_line.describe(command, proc))
        self.assertIn("--data 'data/tiny' has no whole batch of 1024 training rows", proc.stderr)


if __name__ == "__main__":
    tf.test.main()
