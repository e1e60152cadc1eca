"""Tests of `benchmarks.peers`: its measurement rules, and a short real run of every variant."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from benchmarks import harness
from benchmarks import peers as bench
from benchmarks import peers_models as models
from dataprep import synthetic

TINY_ROWS = 6_000  # 5,400 training rows: DeepCTR's arrays hold RUN_WARMUP + RUN_STEPS batches of 1,024
FEATURE_SIZE = 2_000
SEED = 5
RUN_WARMUP = 2
RUN_STEPS = 2
RUN_LOG_EVERY = 2
RUN_EVAL_ROWS = 500  # of the 600 validation rows
PNG_MAGIC = b"\x89PNG"
# The lever of the short run: a model_fn of the benchmark through the library's public path.
LEVER = "library+one_gather"


class ExactAucTest(tf.test.TestCase):

    def test_pairs_ranked_right_over_all_pairs(self):
        # Positive 0.35 beats one negative of two, positive 0.8 beats both: 3 of 4 pairs.
        self.assertAllClose(bench.exact_auc([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8]), 0.75)

    def test_ties_count_half(self):
        self.assertAllClose(bench.exact_auc([0, 1, 0, 1], [0.5, 0.5, 0.2, 0.9]), 0.875)

    def test_agrees_with_counting_pairs(self):
        rng = np.random.default_rng(0)
        labels = rng.integers(0, 2, 300)
        scores = np.round(rng.random(300), 2)  # rounded: many ties
        pos, neg = scores[labels == 1], scores[labels == 0]
        pairs = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
        self.assertAllClose(bench.exact_auc(labels, scores), pairs / (len(pos) * len(neg)))

    def test_one_class_is_refused(self):
        with self.assertRaisesRegex(ValueError, "both classes"):
            bench.exact_auc([1, 1], [0.2, 0.3])


class RunSpecTest(tf.test.TestCase):

    def test_the_window_is_timed_from_the_end_of_warmup(self):
        spec = bench.RunSpec("data", warmup_steps=200, steps=500, log_every_n_steps=100)
        self.assertAllClose(bench.window_rate({100: 0.0, 200: 1.0, 700: 11.0}, spec), 500 * models.BATCH_SIZE / 10.0)

    def test_cpu_per_example_in_the_same_window(self):
        spec = bench.RunSpec("data", warmup_steps=200, steps=500, log_every_n_steps=100)
        self.assertAllClose(bench.window_cpu_us({200: 3.0, 700: 13.0}, spec), 10.0 * 1e6 / (500 * models.BATCH_SIZE))

    def test_an_untimed_step_is_named(self):
        spec = bench.RunSpec("data", warmup_steps=200, steps=500)
        with self.assertRaisesRegex(ValueError, r"step\(s\) \[700\] were not timed"):
            bench.window_rate({200: 1.0}, spec)
        with self.assertRaisesRegex(ValueError, r"step\(s\) \[200\] were not timed"):
            bench.window_cpu_us({700: 1.0}, spec)

    def test_a_progress_interval_that_misses_the_window_is_refused(self):
        with self.assertRaisesRegex(ValueError, "--log_every_n_steps 100 must divide --warmup_steps 150"):
            bench.RunSpec("data", warmup_steps=150, steps=500, log_every_n_steps=100)
        with self.assertRaisesRegex(ValueError, "--steps must be >= 1"):
            bench.RunSpec("data", steps=0)

    def test_goals_name_what_is_missing(self):
        results = {"library": {"examples_per_sec": [3.0]}, "library_compute": {"examples_per_sec": [3.1]}}
        rows = {row[0]: row[1:] for row in bench.goals(results, {})}
        self.assertEqual(rows["library / library_compute >= 0.90"], ["0.97 (0.97-0.97)", "yes"])
        self.assertEqual(rows["library / deepctr+adam >= 1.7"],
                         ["not measured (library or deepctr+adam missing)", "n/a"])


    def test_speed_goals_are_medians_of_per_round_ratios(self):
        # Per-round ratios 0.90, 1.20 and 0.50: median 0.90; the ratio of the medians (60 / 50) would be 1.20.
        results = {"library": {"examples_per_sec": [90.0, 60.0, 10.0]},
                   "library_compute": {"examples_per_sec": [100.0, 50.0, 20.0]}}
        self.assertAllClose(bench.round_ratios(results, "library", "library_compute").median, 0.9)
        rows = {row[0]: row[1:] for row in bench.goals(results, {})}
        self.assertEqual(rows["library / library_compute >= 0.90"], ["0.90 (0.50-1.20)", "yes"])


class OneGatherTest(tf.test.TestCase):

    def test_same_logits_as_the_library_model_from_the_same_rows(self):
        import strategies
        from deepfm.config import ModelConfig
        from deepfm.models import deepfm as library_model

        config = ModelConfig(feature_size=50, field_size=5, embedding_size=4, deep_layers=(8, 4), dropout=(0.0, 0.0))
        rng = np.random.default_rng(1)
        with tf.Graph().as_default(), self.cached_session() as session:
            ids = tf.constant(rng.integers(0, 50, (6, 5)), tf.int64)
            values = tf.constant(rng.random((6, 5)), tf.float32)
            library_logits, library_l2 = library_model.deepfm_logits(ids, values, config, False,
                                                                     strategies.ModelContext())
            # The deep layers and the bias are shared (AUTO_REUSE); the combined table gets the two tables' rows.
            fused_logits, fused_l2 = models.one_gather_logits(ids, values, config, False, strategies.ModelContext())
            by_name = {v.op.name: v for v in tf.compat.v1.global_variables()}
            session.run(tf.compat.v1.global_variables_initializer())
            session.run(by_name["deepfm_model/fm_wv"].assign(tf.concat(
                [tf.expand_dims(by_name["deepfm_model/fm_w"], 1), by_name["deepfm_model/fm_v"]], axis=1)))
            got = session.run([library_logits, fused_logits, library_l2, fused_l2])
        self.assertAllClose(got[0], got[1], rtol=1e-5, atol=1e-5)
        self.assertAllClose(got[2], got[3], rtol=1e-5)


@pytest.mark.slow
class QuickRunTest(tf.test.TestCase):

    def test_every_variant_has_its_row(self):
        data_dir = os.path.join(self.get_temp_dir(), "data")
        results_dir = os.path.join(self.get_temp_dir(), "results")
        synthetic.generate(TINY_ROWS, data_dir, feature_size=FEATURE_SIZE, seed=SEED)
        self.assertEqual(0, bench.benchmark(harness.parse(bench.PeersConfig, [
            "peers", "--data_dir", data_dir, "--results_dir", results_dir, "--runs", "1",
            "--warmup_steps", str(RUN_WARMUP), "--steps", str(RUN_STEPS), "--log_every_n_steps", str(RUN_LOG_EVERY),
            "--eval_rows", str(RUN_EVAL_ROWS), "--variants", ",".join(v.name for v in bench.VARIANTS) + "," + LEVER])))

        with open(os.path.join(results_dir, "peers.json")) as f:
            raw = json.load(f)
        deepctr_missing = bench.deepctr_available()
        measured = set(raw["results"]) | set(raw["absent"])
        self.assertEqual(measured, {v.name for v in bench.VARIANTS} | {LEVER})
        self.assertEqual({"deepctr+adam": bench.DEEPCTR_MISSING} if deepctr_missing else {}, raw["absent"])
        self.assertEqual({}, raw["failures"])
        for name, values in raw["results"].items():
            self.assertLen(values["examples_per_sec"], 1)
            self.assertGreater(values["examples_per_sec"][0], 0, name)
            self.assertBetween(values["auc"][0], 0.0, 1.0)
        with open(os.path.join(results_dir, "peers.md")) as f:
            report = f.read()
        for name in measured:
            self.assertIn("| %s |" % name, report)
        self.assertIn("| ratio to bare+adam | ratio to library |", report)
        if deepctr_missing:
            self.assertIn("not measured: " + bench.DEEPCTR_MISSING, report)
        self.assertIn("| library+adam / bare+adam >= 1.00 |", report)
        with open(os.path.join(results_dir, "peers.png"), "rb") as f:
            self.assertEqual(f.read(len(PNG_MAGIC)), PNG_MAGIC)
