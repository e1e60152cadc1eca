"""`python -m benchmarks.data_check`: both ways of reading the files find the same, and the run is reported."""

import json
import os

import pytest
import tensorflow as tf

from benchmarks import data_check as bench
from tests import command_line


class ConfigTest(tf.test.TestCase):

    def test_bad_values_are_refused_naming_them(self):
        with self.assertRaisesRegex(ValueError, "rows and shards must be >= 1, got 10 and 0"):
            bench.DataCheckConfig(rows=10, shards=0)
        with self.assertRaisesRegex(ValueError, "one must be one of file_by_file, one_pipeline, got 'bogus'"):
            bench.DataCheckConfig(one="bogus")


@pytest.mark.slow
class TrialRunTest(tf.test.TestCase):

    def test_a_trial_run_measures_both_variants_and_leaves_the_committed_results_alone(self):
        # A directory like the project's root, with benchmarks/results/ of its own (the default).
        cwd = command_line.checkout(self.create_tempdir().full_path)
        command = command_line.python_module(
            "benchmarks.data_check", "--rounds", "1", "--rows", "600", "--shards", "3", "--data_dir", "data/bench",
            "--results_dir", "runs/trial")
        result = command_line.run(command, cwd, timeout=600)
        self.assertEqual(0, result.returncode, command_line.describe(command, result))
        with open(os.path.join(cwd, "runs", "trial", "data_check.json")) as f:
            report = json.load(f)
        for variant in bench.VARIANTS:
            for metric in bench.METRICS:
                self.assertLen(report["results"][variant][metric], 1)
                self.assertGreater(report["results"][variant][metric][0], 0)
        with open(os.path.join(cwd, "runs", "trial", "data_check.md")) as f:
            text = f.read()
        self.assertIn("reading of 6 TFRecord files", text)
        self.assertEqual([], os.listdir(os.path.join(cwd, "benchmarks", "results")))

    def test_each_variant_finds_each_files_rows(self):
        data_dir = os.path.join(self.create_tempdir().full_path, "data")
        bench.ensure_data(bench.DataCheckConfig(data_dir=data_dir, rows=500, shards=2))
        found = {variant: bench.check_once(data_dir, variant)["summaries"] for variant in bench.VARIANTS}
        self.assertEqual(found[bench.FILE_BY_FILE], found[bench.ONE_PIPELINE])
        self.assertLen(found[bench.ONE_PIPELINE], 4)
        self.assertEqual(500, sum(summary["rows"] for summary in found[bench.ONE_PIPELINE].values()))


if __name__ == "__main__":
    tf.test.main()
