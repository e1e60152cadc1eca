"""Tests of the large-batch rule (`strategies.large_batch`, `--large_batch_rule cowclip`).

The rule's arithmetic (per-id clipping against a numpy reference, the two
learning rates, the warm-up, the L2 factor) in one process; training with
it under `single`, `tower` and `mirrored` in-process; and, marked slow, two
real ranks of `horovod` and `hybrid` started by `python -m deepfm.launch`.
"""

import importlib
import json
import math
import os
import shutil
import tempfile

import numpy as np
import pytest
import tensorflow as tf
from absl.testing import parameterized

import strategies
from dataprep import synthetic
from deepfm.runtime import run_config
from jobs.local import launcher as launch
from jobs.local import processes
from strategies import context as context_lib
from strategies import large_batch
from strategies import tables as tables_lib
from tests import command_line
from tests.strategies import replica_testing as rt

RATIO = 1.0
FLOOR = 1e-5
WIDTH = 4
NUM_IDS = 8
# Rows of very different norms, so that some ids are clipped and some are not:
# id 0 is all zeros (only the floor bounds it), id 1 is large (never clipped).
ROW_SCALES = np.array([0.0, 100.0, 0.1, 0.1, 0.3, 0.3, 1.0, 1.0], np.float32)
IDS = np.array([[0, 1, 2], [2, 3, 4], [2, 5, 6], [7, 1, 2]], np.int64)

BASE_BATCH = 16
PER_REPLICA_BATCH = 64
WARMUP_STEPS = 20
LEARNING_RATE = 0.1
TRAIN_STEPS = 150
MIN_AUC = 0.9
EVAL_BATCH = 300
EVAL_ROWS = 3 * EVAL_BATCH + 1

NUM_RANKS = 2
RUN_TIMEOUT_SECS = 300
STALL_SHUTDOWN_SECS = 120
FEATURE_SIZE = 2000
TRAIN_ROWS = 8000
VALIDATION_ROWS = 1000
DATA_SEED = 11
RANK_BATCH = 128
RANK_BASE_BATCH = 64
NUM_EPOCHS = 4
RANKS_MIN_AUC = 0.65
RANK_FLAGS = ("--batch_size=%d" % RANK_BATCH, "--num_epochs=%d" % NUM_EPOCHS, "--embedding_size=8",
              "--deep_layers=16,8", "--dropout=0,0", "--learning_rate=0.001", "--seed=7",
              "--log_every_n_steps=20", "--save_checkpoints_steps=50", "--large_batch_rule=cowclip",
              "--large_batch_base=%d" % RANK_BASE_BATCH, "--large_batch_warmup_steps=10")


def numpy_clip(gradient, rows, ids, ratio, floor, share=1.0):
    """The reference: each id's summed gradient scaled to at most count * max(r ||w||, floor sqrt(d)) / share."""
    width = int(np.prod(rows.shape[ids.ndim:]))
    flat_ids = ids.reshape(-1)
    flat_gradient = gradient.reshape(-1, width).astype(np.float64)
    flat_rows = rows.reshape(-1, width).astype(np.float64)
    clipped = flat_gradient.copy()
    for i in np.unique(flat_ids):
        where = flat_ids == i
        total = np.linalg.norm(flat_gradient[where].sum(axis=0))
        bound = where.sum() * max(ratio * np.linalg.norm(flat_rows[where][0]), floor * math.sqrt(width)) / share
        if total > bound:
            clipped[where] *= bound / total
    return clipped.reshape(gradient.shape)


def clipped_ids(gradient, rows, ids, ratio, floor, share=1.0):
    """The ids whose gradient the reference clips."""
    reference = numpy_clip(gradient, rows, ids, ratio, floor, share)
    changed = ~np.isclose(reference, gradient).all(axis=-1)
    return set(ids[changed].tolist())


def table_values():
    rng = np.random.RandomState(0)
    return (rng.randn(NUM_IDS, WIDTH) * ROW_SCALES[:, None]).astype(np.float32)


def upstream_gradient():
    return np.random.RandomState(1).randn(*IDS.shape, WIDTH).astype(np.float32)


def cowclip(global_batch=4 * BASE_BATCH, **overrides) -> large_batch.CowClip:
    values = dict(global_batch=global_batch, base_batch=BASE_BATCH, warmup_steps=WARMUP_STEPS)
    values.update(overrides)
    return large_batch.CowClip(**values)


class ClipTest(tf.test.TestCase, parameterized.TestCase):

    @parameterized.named_parameters(("one_replica", 1.0), ("half_of_the_step", 0.5))
    def test_clip_matches_the_numpy_reference(self, share):
        rows = table_values()[IDS]
        gradient = upstream_gradient()
        clipped = self.evaluate(large_batch.clip_gradient_by_id(
            tf.constant(gradient), tf.constant(rows), tf.constant(IDS), RATIO, FLOOR, share))

        self.assertAllClose(numpy_clip(gradient, rows, IDS, RATIO, FLOOR, share), clipped, rtol=1e-5, atol=1e-7)
        clipped_set = clipped_ids(gradient, rows, IDS, RATIO, FLOOR, share)
        self.assertIn(0, clipped_set)  # a zero row: the floor bounds it
        self.assertNotIn(1, clipped_set)  # a large row
        self.assertNotEqual(set(IDS.ravel().tolist()), clipped_set)

    @parameterized.named_parameters(("one_replica", 1.0), ("half_of_the_step", 0.5))
    def test_the_distinct_clip_is_the_sum_of_the_clipped_occurrences(self, share):
        # One row per distinct id, and a last place that no id uses (an exchange's padding): count 0 and a
        # zero gradient, which stays zero.
        distinct, index, counts = np.unique(IDS.ravel(), return_inverse=True, return_counts=True)
        rows = np.concatenate([table_values()[distinct], np.ones([1, WIDTH], np.float32)])
        summed = np.zeros([len(distinct) + 1, WIDTH], np.float32)
        np.add.at(summed, index, upstream_gradient().reshape(-1, WIDTH))
        clipped = self.evaluate(large_batch.clip_distinct_gradient(
            tf.constant(summed), tf.constant(rows), tf.constant(np.append(counts, 0).astype(np.int32)),
            RATIO, FLOOR, share))

        expected = np.zeros_like(summed)
        np.add.at(expected, index,
                  numpy_clip(upstream_gradient(), table_values()[IDS], IDS, RATIO, FLOOR, share).reshape(-1, WIDTH))
        self.assertAllClose(expected, clipped, rtol=1e-5, atol=1e-6)
        self.assertAllEqual(np.zeros(WIDTH), clipped[-1])

    def test_the_bound_grows_with_the_count_of_the_id(self):
        # The same row and the same gradient per occurrence: twice the
        # occurrences, twice the bound, so the summed gradient is clipped to
        # twice the norm.
        row = np.full([1, WIDTH], 0.5, np.float32)
        gradient = np.full([1, WIDTH], 10.0, np.float32)
        norms = []
        for count in (1, 2):
            clipped = self.evaluate(large_batch.clip_gradient_by_id(
                tf.constant(np.tile(gradient, [count, 1])), tf.constant(np.tile(row, [count, 1])),
                tf.zeros([count], tf.int64), RATIO, FLOOR))
            norms.append(np.linalg.norm(clipped.sum(axis=0)))
        self.assertAllClose([RATIO * np.linalg.norm(row), 2 * RATIO * np.linalg.norm(row)], norms)

    @parameterized.named_parameters(("plain", False, False), ("deduplicated", True, False),
                                    ("deduplicated_beside_weights", True, True))
    def test_table_gradient_is_the_clipped_sum_per_id(self, dedup, with_weights):
        with tf.Graph().as_default():
            rule = cowclip(gradient_share=0.5)
            context = context_lib.ModelContext(embedding_factory=tables_lib.variable_tables(dedup=dedup),
                                               large_batch=rule)
            table = context.embedding("table", NUM_IDS, [WIDTH], initializer=tf.constant_initializer(table_values()))
            if with_weights:
                weights = context.embedding("weights", NUM_IDS)
                rows, scalars = context.lookup([table, weights], tf.constant(IDS))
                self.assertEqual(list(IDS.shape), scalars.shape.as_list())
            else:
                rows = table.lookup(tf.constant(IDS))
            (variable,) = table.variables()
            (gradient,) = tf.gradients(tf.reduce_sum(rows * upstream_gradient()), [variable])
            op_types = {op.type for op in tf.compat.v1.get_default_graph().get_operations()}
            with self.session() as session:
                session.run(tf.compat.v1.global_variables_initializer())
                dense = session.run(tf.convert_to_tensor(gradient))

        # A deduplicated table clips its distinct rows: no second `Unique` and segment sums over the occurrences.
        self.assertEqual(not dedup, "UnsortedSegmentMin" in op_types)

        clipped = numpy_clip(upstream_gradient(), table_values()[IDS], IDS, RATIO, FLOOR, 0.5)
        expected = np.zeros([NUM_IDS, WIDTH])
        np.add.at(expected, IDS.ravel(), clipped.reshape(-1, WIDTH))
        self.assertAllClose(expected, dense, rtol=1e-5, atol=1e-7)
        self.assertIs(table, context.tables[0])

    def test_tables_of_scalars_are_not_clipped(self):
        with tf.Graph().as_default():
            context = context_lib.ModelContext(large_batch=cowclip())
            table = context.embedding("weights", NUM_IDS, initializer=tf.zeros_initializer())
            rows = table.lookup(tf.constant(IDS))
            upstream = np.random.RandomState(2).randn(*IDS.shape).astype(np.float32) * 100
            (gradient,) = tf.gradients(tf.reduce_sum(rows * upstream), table.variables())
            with self.session() as session:
                session.run(tf.compat.v1.global_variables_initializer())
                dense = session.run(tf.convert_to_tensor(gradient))
        expected = np.zeros([NUM_IDS])
        np.add.at(expected, IDS.ravel(), upstream.ravel())
        self.assertAllClose(expected, dense)


class RuleTest(tf.test.TestCase, parameterized.TestCase):

    def test_ratios(self):
        rule = cowclip(global_batch=8 * BASE_BATCH)
        self.assertEqual(8.0, rule.ratio)
        self.assertAllClose(math.sqrt(8.0), rule.dense_learning_rate_factor)
        self.assertAllClose(8e-4, rule.l2_weight(1e-4))

    @parameterized.parameters((0, 1.0 / WARMUP_STEPS), (9, 0.5), (WARMUP_STEPS - 1, 1.0), (10 * WARMUP_STEPS, 1.0))
    def test_warmup_is_linear_to_the_scaled_rate(self, step, factor):
        rule = cowclip()
        self.assertAllClose(factor, self.evaluate(rule.warmup(tf.constant(step, tf.int64))))
        self.assertAllClose(LEARNING_RATE * 2.0 * factor,
                            self.evaluate(rule.dense_learning_rate(LEARNING_RATE, tf.constant(step, tf.int64))))

    def test_no_warmup(self):
        self.assertAllClose(1.0, self.evaluate(cowclip(warmup_steps=0).warmup(tf.constant(0, tf.int64))))

    @parameterized.named_parameters(
        ("default_at_8192", 8192, None, None, 100),
        ("default_twice_the_replicas", 2 * 8192, None, None, 50),
        ("examples_rounded_up", 1000, None, 2500, 3),
        ("steps_whatever_the_batch", 2 * 8192, 100, None, 100),
        ("no_warmup_in_examples", 8192, None, 0, 0),
    )
    def test_warmup_steps_hold_the_same_examples_at_any_global_batch(self, global_batch, steps, examples, expected):
        self.assertEqual(expected, large_batch.warmup_steps_for(global_batch, steps, examples))
        rule = large_batch.make_rule(large_batch.COWCLIP, global_batch, warmup_steps=steps, warmup_examples=examples)
        self.assertEqual(expected, rule.warmup_steps)

    def test_a_rule_built_directly_warms_up_over_the_default_examples(self):
        expected = -(-large_batch.DEFAULT_WARMUP_EXAMPLES // (4 * BASE_BATCH))
        self.assertEqual(expected, cowclip(warmup_steps=None).warmup_steps)

    def test_none_is_no_rule(self):
        self.assertIsNone(large_batch.make_rule(large_batch.NONE, global_batch=8192))
        self.assertEqual(cowclip(), large_batch.make_rule(large_batch.COWCLIP, 4 * BASE_BATCH, BASE_BATCH,
                                                          WARMUP_STEPS))

    @parameterized.named_parameters(
        ("rule", dict(large_batch_rule="lars"), r"--large_batch_rule must be one of none, cowclip, got 'lars'"),
        ("base", dict(large_batch_base=0), r"--large_batch_base must be >= 1"),
        ("warmup", dict(large_batch_warmup_steps=-1), r"--large_batch_warmup_steps must be >= 0"),
        ("warmup_examples", dict(large_batch_warmup_examples=-5), r"--large_batch_warmup_examples must be >= 0.*-5"),
        ("both_warmups", dict(large_batch_warmup_steps=10, large_batch_warmup_examples=8192),
         r"--large_batch_warmup_steps 10 and --large_batch_warmup_examples 8192 both given: give one"),
    )
    def test_bad_options_are_named(self, values, message):
        with self.assertRaisesRegex(ValueError, message):
            strategies.make_config("single", **values)

    def test_embedding_rate_stays_and_dense_rate_is_scaled_and_warmed_up(self):
        # Plain gradient descent, gradients of 1: each step moves a variable by its learning rate.
        with tf.Graph().as_default():
            context = context_lib.ModelContext(large_batch=cowclip())
            weights = context.embedding("weights", NUM_IDS, initializer=tf.ones_initializer())
            dense = tf.compat.v1.get_variable("dense", [2], initializer=tf.ones_initializer())
            loss = tf.reduce_sum(weights.lookup(tf.constant([0, 1]))) + tf.reduce_sum(dense)
            train_op = context.minimize(loss, tf.compat.v1.train.GradientDescentOptimizer, LEARNING_RATE)
            step = tf.compat.v1.train.get_global_step()
            with self.session() as session:
                session.run(tf.compat.v1.global_variables_initializer())
                for _ in range(2):
                    session.run(train_op)
                table, dense_value, global_step = session.run([weights.variables()[0], dense, step])

        self.assertEqual(2, global_step)
        self.assertAllClose([1 - 2 * LEARNING_RATE] * 2 + [1.0] * (NUM_IDS - 2), table)
        # sqrt(k) = 2, warmed up over 20 steps: 1/20 at step 0, 2/20 at step 1.
        self.assertAllClose([1 - LEARNING_RATE * 2 * (1 + 2) / WARMUP_STEPS] * 2, dense_value)

    def test_l2_weight(self):
        self.assertEqual(1e-4, context_lib.ModelContext().l2_weight(1e-4))
        self.assertAllClose(4e-4, context_lib.ModelContext(large_batch=cowclip()).l2_weight(1e-4))

    def test_partitioned_tables_are_trained_as_embeddings(self):
        with tf.Graph().as_default():
            context = context_lib.ModelContext(
                embedding_factory=tables_lib.variable_tables(partitioner=tf.compat.v1.fixed_size_partitioner(2)),
                large_batch=cowclip())
            table = context.embedding("table", NUM_IDS, [WIDTH])
            self.assertEqual([[NUM_IDS // 2, WIDTH]] * 2, [v.shape.as_list() for v in table.variables()])
            dense = tf.compat.v1.get_variable("dense", [1])
            optimizer = context.large_batch.optimizer(
                tf.compat.v1.train.GradientDescentOptimizer, LEARNING_RATE, context.embedding_variables())
            self.assertTrue(all(optimizer.is_embedding(v) for v in table.variables()))
            self.assertFalse(optimizer.is_embedding(dense))


class StrategyContextTest(tf.test.TestCase, parameterized.TestCase):

    @parameterized.named_parameters(
        ("single", "single", {}, 1, 1.0),
        ("tower", "tower", dict(num_devices=2, device_type="cpu"), 2, 0.5),
        # The V1 optimizers divide each mirrored replica's loss by the replicas already.
        ("mirrored", "mirrored", dict(num_devices=2, device_type="cpu"), 2, 1.0),
    )
    def test_rule_at_the_global_batch(self, name, options, replicas, share):
        strategy = strategies.get(strategies.make_config(name, large_batch_rule="cowclip", **options))
        strategy.setup()
        rule = strategy.model_context(tf.estimator.ModeKeys.TRAIN, PER_REPLICA_BATCH).large_batch
        self.assertEqual(PER_REPLICA_BATCH * replicas, rule.global_batch)
        self.assertEqual(large_batch.DEFAULT_BASE_BATCH, rule.base_batch)
        self.assertEqual(share, rule.gradient_share)
        self.assertIsNone(strategy.model_context(tf.estimator.ModeKeys.PREDICT, PER_REPLICA_BATCH).large_batch)

    def test_none_changes_nothing(self):
        strategy = strategies.get(strategies.make_config("single"))
        strategy.setup()
        self.assertIsNone(strategy.model_context(tf.estimator.ModeKeys.TRAIN, PER_REPLICA_BATCH).large_batch)
        self.assertIsNone(strategy.model_context(tf.estimator.ModeKeys.TRAIN).large_batch)

    def test_a_rule_without_the_batch_is_refused(self):
        strategy = strategies.get(strategies.make_config("single", large_batch_rule="cowclip"))
        strategy.setup()
        with self.assertRaisesRegex(ValueError, r"--large_batch_rule cowclip needs the per-replica batch"):
            strategy.model_context(tf.estimator.ModeKeys.TRAIN)


class ResumeTest(tf.test.TestCase, parameterized.TestCase):
    """The rule's two optimizers keep their own state: turning it on or off cannot resume a checkpoint."""

    @staticmethod
    def record(rule):
        strategy = {} if rule is None else {"large_batch_rule": rule}
        return {"format_version": run_config.FORMAT_VERSION, "strategy": strategy}

    @parameterized.named_parameters(
        ("on", "none", "cowclip"), ("off", "cowclip", "none"), ("on_after_a_record_without_the_option", None,
                                                                 "cowclip"))
    def test_turning_the_rule_on_or_off_is_refused(self, before, after):
        model_dir = tempfile.mkdtemp(dir=self.get_temp_dir())
        run_config.write(model_dir, self.record(before))
        with self.assertRaisesRegex(run_config.ConfigMismatchError, r"strategy.large_batch_rule was .*, now '%s'"
                                    % after):
            run_config.check_resume(model_dir, self.record(after))

    @parameterized.named_parameters(
        ("same_rule", "cowclip", "cowclip", []),
        # A record written before the option existed had no rule: `none` is the same, reported as a change.
        ("record_without_the_option", None, "none", [(run_config.LARGE_BATCH_RULE_KEY, None, "none")]))
    def test_the_same_rule_resumes(self, before, after, changed):
        model_dir = tempfile.mkdtemp(dir=self.get_temp_dir())
        run_config.write(model_dir, self.record(before))
        self.assertEqual(changed, run_config.check_resume(model_dir, self.record(after)))


class TrainingTest(tf.test.TestCase, parameterized.TestCase):

    @parameterized.named_parameters(
        ("single", "single", {}),
        ("tower", "tower", dict(num_devices=2, device_type="cpu")),
        ("mirrored", "mirrored", dict(num_devices=2, device_type="cpu")),
    )
    def test_learns_with_the_rule(self, name, options):
        strategy = strategies.get(strategies.make_config(
            name, large_batch_rule="cowclip", large_batch_base=BASE_BATCH, large_batch_warmup_steps=WARMUP_STEPS,
            **options))
        rt.assert_learns(self, strategy, self.get_temp_dir(), PER_REPLICA_BATCH, TRAIN_STEPS, EVAL_ROWS,
                         EVAL_BATCH, MIN_AUC)


@pytest.mark.slow
class TwoRanksTest(tf.test.TestCase, parameterized.TestCase):
    """Two real ranks through `python -m deepfm.launch` (horovodrun, Gloo) on tiny synthetic data."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        # One dataset for both strategies' jobs: they only read it (the first job's data check records the
        # files it read beside them, and the second skips reading them again), and each writes in its work_dir.
        cls.data_root = tempfile.mkdtemp(dir=tf.compat.v1.test.get_temp_dir())
        synthetic.generate(TRAIN_ROWS + VALIDATION_ROWS, cls.data_root, feature_size=FEATURE_SIZE,
                           val_fraction=VALIDATION_ROWS / (TRAIN_ROWS + VALIDATION_ROWS), shards=2, seed=DATA_SEED)

    def setUp(self):
        super().setUp()
        try:
            importlib.import_module("horovod.tensorflow")
        except ImportError as e:
            self.skipTest("Horovod is not installed here: %s" % e)
        self.work_dir = tempfile.mkdtemp(dir=self.get_temp_dir())
        self.addCleanup(shutil.rmtree, self.work_dir, ignore_errors=True)
        self.rank_tmp = os.path.join(self.work_dir, "tmp")
        self.log_dir = os.path.join(self.work_dir, "logs")
        os.makedirs(self.rank_tmp)

    @parameterized.named_parameters(("horovod", "horovod"), ("hybrid", "hybrid"))
    def test_two_ranks_learn_with_the_rule(self, name):
        data_root = self.data_root
        model_dir = os.path.join(self.work_dir, "model")
        metrics_file = os.path.join(self.work_dir, "metrics.json")
        # A user's environment (`tests.command_line`) and what the test sets on purpose: a private
        # TMPDIR (no rank may leave files there) and Horovod's stall shutdown.
        env = command_line.environment(dict(TMPDIR=self.rank_tmp,
                                            HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=str(STALL_SHUTDOWN_SECS)))
        group = processes.ProcessGroup(self.log_dir)
        self.addCleanup(group.stop)
        group.start("launch", [
            "python", "-m", "deepfm.launch", "--strategy=" + name, "--np=%d" % NUM_RANKS,
            "--horovod_controller=gloo", "--log_dir=" + self.log_dir, "--timeout_s=%d" % RUN_TIMEOUT_SECS, "--",
            "--train_data=" + data_root, "--model_dir=" + model_dir, "--metrics_file=" + metrics_file,
            # Horovod's own scaling with the ranks gives way to the rule's.
            "--lr_scaling=linear"] + list(RANK_FLAGS), env=env)
        log_path = os.path.join(self.log_dir, launch.HOROVOD_TASK + ".log")
        try:
            group.wait(timeout=RUN_TIMEOUT_SECS)
        except (processes.TaskFailedError, TimeoutError) as e:
            self.fail("%s\n%s" % (e, processes.log_tail(log_path)))
        with open(log_path) as f:
            output = f.read()
        with open(metrics_file) as f:
            metrics = json.load(f)

        self.assertGreater(metrics["auc"], RANKS_MIN_AUC)
        steps = (TRAIN_ROWS // NUM_RANKS // RANK_BATCH) * NUM_EPOCHS
        self.assertEqual(steps, metrics["global_step"])
        self.assertIn("rank 0 of 2", output)
        self.assertIn("lr x1 (linear)", output)
        self.assertEqual([], command_line.left_in(self.rank_tmp), "a rank left its private model_dir behind")
