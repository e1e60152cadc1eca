"""`python -m benchmarks.step_parallelism`: its arguments, its report, and a real run at tiny size."""

import json
import os

import pytest
import tensorflow as tf
from absl import app

from benchmarks import harness, step_parallelism
from benchmarks import topology as topology_lib
from dataprep import synthetic
from tests import command_line, paths


def _run(rate, work, path, span):
    return {"examples_per_sec": rate, "vcpus": [0],
            "traced": {"span_ms": span, "work_ms": work, "critical_path_ms": path, "parallelism": work / path},
            "critical_ops": [{"name": "deepfm_model/deep/Relu", "op": "_MklNativeFusedMatMul", "ms": 3.5}]}


class ArgumentsTest(tf.test.TestCase):

    def test_bad_arguments_are_named(self):
        available = len(os.sched_getaffinity(0))
        for args, message in ((["--cores", "x"], "--cores takes vCPU counts separated by commas, got 'x'"),
                              (["--cores", str(available + 1)], "each must be in \\[1, %d\\]" % available),
                              (["--steps", "50"], "--steps must be > 100"),
                              (["--runs", "0"], "--runs must be >= 1, got 0"),
                              (["--threads", "2"], "--threads \\(\\(2,\\),\\): each must be intra/inter"),
                              (["--threads", "a/b"], "--threads takes intra/inter pairs")):
            with self.assertRaisesRegex(app.UsageError, message, msg=args):
                harness.parse(step_parallelism.StepParallelismConfig, ["step_parallelism"] + args)

    def test_the_recorded_command_leaves_the_results_dir_out(self):
        self.assertEqual(["--runs", "3"], harness.recorded_flags(["--results_dir", "/tmp/x", "--runs", "3"]))
        self.assertEqual(["--runs", "3"], harness.recorded_flags(["--results_dir=/tmp/x", "--runs", "3"]))


class ReportTest(tf.test.TestCase):

    def test_the_plan_adds_thread_counts_on_every_vcpu_count_but_the_first(self):
        layouts = step_parallelism.plan((1, 2, 4), ((1, 2), (2, 2)))
        self.assertEqual(["1 vCPU(s), threads 1/1", "2 vCPU(s), threads 2/2", "4 vCPU(s), threads 4/4",
                          "2 vCPU(s), threads 1/2", "4 vCPU(s), threads 1/2", "4 vCPU(s), threads 2/2"],
                         [layout.label for layout in layouts])

    def test_speedups_bounds_and_inflation_per_round(self):
        layouts = step_parallelism.plan((1, 2), ((1, 2),))
        one, two, two_12 = (layout.label for layout in layouts)
        # Round 1: the machine twice as fast; per round the ratios are the same.
        rounds = [{one: _run(40_000, 24.0, 12.0, 27.0), two: _run(56_000, 36.0, 15.0, 19.0),
                   two_12: _run(60_000, 30.0, 15.0, 18.0)},
                  {one: _run(80_000, 24.0, 12.0, 27.0), two: _run(112_000, 36.0, 15.0, 19.0),
                   two_12: _run(120_000, 30.0, 15.0, 18.0)}]
        topology = topology_lib.Topology.parse("CPU CORE\n0 0\n1 1\n")
        body = step_parallelism.report_body(layouts, rounds, 1024, 400, topology)
        # 2 vCPUs: x1.40 measured; bound 24 / max(12, 12) = 2.00; work 36 / 24 = 1.50 of one vCPU's.
        self.assertIn("| 2 | 2/2 | 84,000 (56,000-112,000) | 1.40 (1.40-1.40) | 2.00 (2.00-2.00) | 19.0 (19.0-19.0) | "
                      "36.0 (36.0-36.0) | 15.0 (15.0-15.0) | 2.40 (2.40-2.40) | 1.50 (1.50-1.50) |", body)
        self.assertIn("| 1 | 1/1 | 60,000 (40,000-80,000) | 1.00 (1.00-1.00) | 1.00 (1.00-1.00) |", body)
        self.assertIn("| 2 | 1/2 | 90,000 (60,000-120,000) | 1.50 (1.50-1.50) | 2.00 (2.00-2.00) |", body)
        self.assertIn("`deepfm_model/deep/Relu` (_MklNativeFusedMatMul) 3.50 ms", body)


@pytest.mark.slow
class RealRunTest(tf.test.TestCase):
    """The whole command at tiny size: real training processes, traced, on 1 vCPU (and 2 where there are)."""

    def test_every_core_count_is_measured_and_written(self):
        data = self.create_tempdir().full_path
        synthetic.generate(3000, data, feature_size=1000, seed=0)
        results = self.create_tempdir().full_path
        cores = "1,2" if len(os.sched_getaffinity(0)) >= 2 else "1"
        done = command_line.run(command_line.python_module(
            "benchmarks.step_parallelism", "--results_dir", results, "--data_dir", data, "--cores", cores,
            "--threads", "1/2", "--runs", "1", "--steps", "120", "--batch_size", "64"), paths.REPO_ROOT, timeout=600)
        self.assertEqual(0, done.returncode, done.stderr[-3000:])
        with open(os.path.join(results, "step_parallelism.json")) as f:
            written = json.load(f)
        rounds = written["results"]["rounds"]
        self.assertLen(rounds, 1)
        expected = ["1 vCPU(s), threads 1/1"] + (["2 vCPU(s), threads 2/2", "2 vCPU(s), threads 1/2"]
                                                 if cores == "1,2" else [])
        self.assertCountEqual(expected, list(rounds[0]))
        for run in rounds[0].values():
            self.assertGreater(run["examples_per_sec"], 0)
            self.assertGreater(run["traced"]["critical_path_ms"], 0)
            self.assertLessEqual(run["traced"]["critical_path_ms"], run["traced"]["work_ms"])
        self.assertNotIn(results, written["machine"]["command"])
        with open(os.path.join(results, "step_parallelism.md")) as f:
            self.assertIn("| 1 | 1/1 | ", f.read())


if __name__ == "__main__":
    tf.test.main()
