"""`python -m benchmarks.criteo_convert`: its options, its targets, and a tiny real run of both parts."""

import json
import os

import pytest
import tensorflow as tf

from benchmarks import criteo_convert, harness
from tests import command_line


class ConfigTest(tf.test.TestCase):

    def test_a_conversion_per_distinct_count_and_worker_count_and_the_copies_last(self):
        config = criteo_convert.CriteoConvertConfig(distinct="10,20", workers="1,2", copies=3)
        self.assertEqual([(10, 1, 1), (10, 2, 1), (10, 1, 3), (20, 1, 1), (20, 2, 1), (20, 1, 3)],
                         criteo_convert.conversions(config))
        self.assertEqual("convert_10_x3", criteo_convert.convert_variant_name(10, 1, 3))
        self.assertEqual("20 distinct, 2 workers", criteo_convert.convert_label(20, 2))

    def test_bad_values_name_their_flag(self):
        for kwargs, message in (({"workers": "1,two"}, "--workers '1,two': give comma-separated integers"),
                                ({"distinct": "0"}, "--distinct '0': give comma-separated integers >= 1"),
                                ({"decode_rows": -1}, "--decode_rows must be >= 0"),
                                ({"one_decode": "csv"}, "--one_decode 'csv': not one of tfrecord"),
                                ({"rounds": 0}, "--runs must be >= 1")):
            with self.assertRaisesRegex(ValueError, message):
                criteo_convert.CriteoConvertConfig(**kwargs)


class TargetsTest(tf.test.TestCase):

    def test_the_speed_up_and_the_accounting_come_from_the_rounds(self):
        config = criteo_convert.CriteoConvertConfig(distinct="10", workers="1,2", copies=1, rows=100)

        def conversion(seconds, rows, lines):
            return {"seconds": [seconds], "rows": [rows], "lines": [lines], "sum_rss_mb": [100.0],
                    harness.PEAK_RSS_MB: [60.0]}
        results = harness.Results(
            ["convert_10_1w", "convert_10_2w"],
            {"convert_10_1w": conversion(4.0, 100, 100), "convert_10_2w": conversion(2.0, 99, 100)},
            {"convert_10_1w": [{}], "convert_10_2w": [{}]}, {}, 1)
        rows = criteo_convert.target_rows(config, results, {"convert_10_1w", "convert_10_2w"})
        self.assertEqual(["every row accounted for", "NOT all runs", "no"], rows[1])
        self.assertEqual(["2 workers >= 1.8x 1 worker (10 distinct)", "2.00x (median seconds)", "yes"], rows[2])


@pytest.mark.slow
class TinyRunTest(tf.test.TestCase):

    def test_a_conversion_and_a_read_are_measured_and_written(self):
        cwd = command_line.checkout(self.create_tempdir().full_path)
        command = command_line.python_module(
            "benchmarks.criteo_convert", "--runs", "1", "--rows", "3000", "--distinct", "300", "--workers", "1",
            "--copies", "1", "--decode_rows", "2000", "--variants", "convert_300_1w,tfrecord",
            "--data_dir", "data/criteo_raw", "--results_dir", "runs/trial")
        result = command_line.run(command, cwd, timeout=600)
        self.assertEqual(0, result.returncode, command_line.describe(command, result))
        with open(os.path.join(cwd, "runs", "trial", "criteo_convert.json")) as f:
            written = json.load(f)
        conversion = written["results"]["convert_300_1w"]
        self.assertEqual(conversion["lines"], [3000.0])
        self.assertEqual(conversion["rows"], conversion["lines"])
        self.assertGreater(conversion[harness.PEAK_RSS_MB][0], 0)
        self.assertGreater(written["results"]["tfrecord"]["examples_per_sec"][0], 0)
        self.assertEqual({}, written["failures"])
        with open(os.path.join(cwd, "runs", "trial", "criteo_convert.md")) as f:
            report = f.read()
        self.assertIn("| 300 distinct, 1 worker |", report)
        self.assertIn("| every row accounted for | all runs | yes |", report)
        self.assertIn("| tfrecord |", report)
        self.assertIn("python -m benchmarks.criteo_convert --runs 1 --rows 3000", report)
        self.assertTrue(os.path.exists(os.path.join(cwd, "runs", "trial", "criteo_convert.png")))


if __name__ == "__main__":
    tf.test.main()
