"""Tests of the step traces: the breakdown's arithmetic and the hook in a real training run."""

import json
import os

import tensorflow as tf

import strategies
from dataprep import synthetic
from deepfm import config, job_config
from deepfm.runtime import step_trace, trainer
from input_pipeline import files, pipeline

LOCAL = "/job:localhost/replica:0/task:0/device:CPU:0"
WORKER = "/job:worker/replica:0/task:0/device:CPU:0"
PS = "/job:ps/replica:0/task:0/device:CPU:0"
START_US = 1_000_000


def step_stats(device_ops):
    """A StepStats proto: {device: [(node name, op type, start ms, end ms)]}, times from START_US."""
    metadata = tf.compat.v1.RunMetadata()
    for device, ops in device_ops.items():
        dev = metadata.step_stats.dev_stats.add(device=device)
        for name, op, start_ms, end_ms in ops:
            dev.node_stats.add(node_name=name, timeline_label="%s = %s(a, b)" % (name, op),
                               all_start_micros=START_US + int(start_ms * 1000),
                               all_end_rel_micros=int((end_ms - start_ms) * 1000), thread_id=7)
    return metadata.step_stats


class BreakdownTest(tf.test.TestCase):

    def test_split_of_a_step_with_an_exchange_tail(self):
        stats = step_stats({LOCAL: [
            ("IteratorGetNext", "IteratorGetNext", 0, 1),
            ("deepfm_model/MatMul", "MatMul", 1, 5),
            ("gradients/MatMul_grad/MatMul", "MatMul", 5, 10),
            ("Allreduce/HorovodAllgather", "HorovodAllgather", 10, 20),
            ("Allreduce/concat", "ConcatV2", 12, 14),
            ("Adam/update", "ResourceScatterSub", 21, 23),
        ]})
        result = step_trace.breakdown(step_trace.op_runs(stats))
        self.assertAllClose(23.0, result["span_ms"])
        self.assertAllClose(14.0, result["compute_ms"])  # 1 + 4 + 5 + 2 + 2
        self.assertAllClose(8.0, result["exchange_only_ms"])  # 10..20 less the concat's 2
        self.assertAllClose(1.0, result["idle_ms"])  # 20..21
        self.assertAllClose(10.0, result["gradients_done_ms"])
        self.assertAllClose(12.0, result["op_ms_by_scope"]["Allreduce"])
        self.assertEqual("Allreduce", next(iter(result["op_ms_by_scope"])))

    def test_remote_devices_are_counted_apart(self):
        stats = step_stats({
            WORKER: [("deepfm_model/embedding/_Recv", "_Recv", 0, 6), ("gradients/x", "Mul", 6, 9)],
            PS: [("deepfm_model/embedding/Gather", "ResourceGather", 1, 3)],
        })
        result = step_trace.breakdown(step_trace.op_runs(stats), own_job="worker")
        self.assertAllClose(9.0, result["span_ms"])
        self.assertAllClose(3.0, result["compute_ms"])
        self.assertAllClose(6.0, result["exchange_only_ms"])
        self.assertAllClose(2.0, result["op_ms_by_scope"]["remote:ps"])
        self.assertNotIn("ps", result["op_ms_by_scope"])

    def test_no_op_of_this_process_is_an_error_naming_the_job(self):
        stats = step_stats({PS: [("a", "Mul", 0, 1)]})
        with self.assertRaisesRegex(ValueError, "job 'worker'.*job:ps"):
            step_trace.breakdown(step_trace.op_runs(stats), own_job="worker")

    def test_scopes_beyond_the_top_are_summed(self):
        ops = [("scope%d/op" % i, "Mul", i, i + 1 + i / 10.0) for i in range(step_trace.TOP_SCOPES + 3)]
        result = step_trace.breakdown(step_trace.op_runs(step_stats({LOCAL: ops})))
        self.assertLen(result["op_ms_by_scope"], step_trace.TOP_SCOPES + 1)
        self.assertAllClose(1.0 + 1.1 + 1.2, result["op_ms_by_scope"][step_trace.OTHER_SCOPES])  # the 3 shortest

    def test_median_over_steps(self):
        steps = [{"span_ms": span, "compute_ms": 1.0, "exchange_only_ms": 0.0, "idle_ms": 0.0,
                  "gradients_done_ms": None, "op_ms_by_scope": {"a": span}} for span in (3.0, 1.0, 2.0)]
        result = step_trace.median_breakdown(steps)
        self.assertEqual(2.0, result["span_ms"])
        self.assertIsNone(result["gradients_done_ms"])
        self.assertEqual({"a": 2.0}, result["op_ms_by_scope"])

    def test_chrome_trace_has_one_box_per_op(self):
        stats = step_stats({LOCAL: [("gradients/x", "Mul", 0, 2)], PS: [("y", "_Send", 1, 2)]})
        trace = step_trace.chrome_trace(step_trace.op_runs(stats))
        boxes = [e for e in trace["traceEvents"] if e["ph"] == "X"]
        self.assertEqual(["Mul", "_Send"], sorted(e["name"] for e in boxes))
        self.assertEqual({"compute", "exchange"}, {e["cat"] for e in boxes})
        self.assertEqual(2000, [e for e in boxes if e["name"] == "Mul"][0]["dur"])

    def test_bad_arguments_are_named(self):
        with self.assertRaisesRegex(ValueError, "num_steps must be >= 1, got 0"):
            step_trace.StepTraceHook(self.get_temp_dir(), "main", 0)
        with self.assertRaisesRegex(ValueError, "--trace_steps must be >= 0, got -1"):
            config.TrainConfig(model_dir="m", train_files=("a",), trace_steps=-1)


class TrainingTraceTest(tf.test.TestCase):

    def test_training_writes_traces_and_a_breakdown(self):
        root = self.create_tempdir().full_path
        data_dir = os.path.join(root, "data")
        metadata = synthetic.generate(4_000, data_dir, feature_size=500, seed=5, shards=1)
        model_dir = os.path.join(root, "model")
        train = config.TrainConfig(model_dir=model_dir, train_files=tuple(files.resolve([data_dir], "tfrecord")),
                                   batch_size=64, max_steps=step_trace.DEFAULT_WARMUP_STEPS + 12,
                                   trace_steps=2, seed=1)
        model = config.ModelConfig(feature_size=metadata.feature_size, embedding_size=4, deep_layers=(8,),
                                   dropout=(0.0,))
        trainer.run(job_config.JobConfig(train=train, model=model, input=pipeline.PipelineConfig(),
                                         strategy=strategies.StrategyConfig(name="single")))
        traces = os.path.join(model_dir, trainer.TRACE_DIR)
        first = step_trace.DEFAULT_WARMUP_STEPS
        second = first + step_trace.DEFAULT_EVERY_N_STEPS
        self.assertCountEqual(["main-step%d.trace.json" % first, "main-step%d.trace.json" % second,
                               "main.summary.json"], os.listdir(traces))
        with open(os.path.join(traces, "main-step%d.trace.json" % first)) as f:
            names = {event["args"]["name"] for event in json.load(f)["traceEvents"] if event["ph"] == "X"}
        self.assertTrue(any(name.startswith("gradients/") for name in names), sorted(names)[:20])
        summary = step_trace.read_summary(os.path.join(traces, "main.summary.json"))
        self.assertEqual([first, second], [step["step"] for step in summary["steps"]])
        median = summary["median"]
        self.assertGreater(median["compute_ms"], 0.0)
        self.assertEqual(0.0, median["exchange_only_ms"])
        self.assertLessEqual(median["gradients_done_ms"], median["span_ms"])
        # The critical path of the real step: a chain through the forward and backward passes, shorter than
        # the step's work, which is the sum of what the breakdown saw by scope.
        path = summary["steps"][0][step_trace.CRITICAL_PATH]
        self.assertGreater(path["critical_path_ms"], 0.0)
        self.assertLessEqual(path["critical_path_ms"], path["work_ms"] + 1e-9)
        self.assertAlmostEqual(path["work_ms"], sum(summary["steps"][0]["op_ms_by_scope"].values()), delta=1e-6)
        self.assertTrue(path["critical_ops"], path)
        self.assertGreaterEqual(median[step_trace.CRITICAL_PATH]["parallelism"], 1.0)


if __name__ == "__main__":
    tf.test.main()
