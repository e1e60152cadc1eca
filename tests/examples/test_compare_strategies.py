"""`examples/compare_strategies.py` on tiny data: strategies of one and of several processes, side by side."""

import pytest
import tensorflow as tf

from tests.examples import examples_testing

# One strategy trained in one process, one of two, and one of Horovod ranks: a few dozen steps each.
STRATEGIES = ("single", "tower", "horovod")
TIMEOUT_S = 600
# deepfm.train flags for every run: a tiny model that learns in 30 steps.
TRAIN_FLAGS = ["--learning_rate", "0.01", "--embedding_size", "4", "--deep_layers", "16", "--dropout", "0"]
# Measured: 0.70 to 0.72 after 30 steps of 256 examples.
MIN_AUC = 0.6


class ArgumentsTest(tf.test.TestCase):

    def test_an_unknown_strategy_is_named(self):
        proc = examples_testing.run_example(
            "compare_strategies", [examples_testing.shared_dataset(), "--strategies", "single,towers"])
        self.assertNotEqual(0, proc.returncode)
        self.assertIn("unknown towers; choose from single, tower, mirrored, ps, horovod, hybrid", proc.stderr)

    def test_a_folder_without_metadata_is_refused(self):
        proc = examples_testing.run_example("compare_strategies", [self.create_tempdir().full_path])
        self.assertNotEqual(0, proc.returncode)
        self.assertIn("is not a dataset root (no metadata.json)", proc.stderr)


@pytest.mark.slow
class CompareTest(tf.test.TestCase):

    def test_prints_examples_per_sec_and_auc_side_by_side(self):
        args = [examples_testing.shared_dataset(), "--strategies", ",".join(STRATEGIES), "--steps", "20",
                "--warmup_steps", "10", "--global_batch", "256", "--"] + TRAIN_FLAGS
        proc = examples_testing.run_example("compare_strategies", args, timeout=TIMEOUT_S)
        self.assertEqual(0, proc.returncode, proc.stderr[-3000:])
        rows = {}
        for line in proc.stdout.splitlines():
            cells = [cell.strip() for cell in line.strip("|").split("|")]
            if cells[0] in STRATEGIES:
                rows[cells[0]] = cells
        self.assertEqual(set(STRATEGIES), set(rows), proc.stdout)
        self.assertIn("AUC after 7,680 examples", proc.stdout)  # (10 + 20) steps of 256
        for cells in rows.values():
            rate = float(cells[2].replace(",", ""))
            self.assertGreater(rate, 0, cells)
            auc = float(cells[4])
            self.assertBetween(auc, MIN_AUC, 1.0, cells)
        self.assertEqual("1.00", rows["single"][3])


if __name__ == "__main__":
    tf.test.main()
