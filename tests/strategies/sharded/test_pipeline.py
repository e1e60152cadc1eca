"""Tests of `strategies.sharded.pipeline`: the next batch's exchange while the current batch trains.

The fast tests build the pipeline by hand with Horovod in this process (one
rank). The slow one trains the `hybrid` strategy at 3 real ranks (a first, a
middle and a last rank) with and without the pipeline, across an epoch
boundary and a checkpoint resume, and compares every step's loss; the
strategy's own tests train it at 2.
"""

import os
import tempfile

import numpy as np
import pytest
import tensorflow as tf
from absl.testing import parameterized

from dataprep import synthetic
from input_pipeline import dataset, schema
from strategies.sharded import pipeline as pipeline_lib
from strategies.sharded import table as table_lib
from tests.strategies.sharded import rank_program, ranks_testing

IDS = "feat_ids"
NUM_ROWS = 20
WIDTH = 2
BATCHES = 5
LEARNING_RATE = 0.5


def _batches():
    """Distinct batches of 3 examples x 2 ids, with repeated ids, and their labels."""
    rng = np.random.RandomState(4)
    ids = rng.randint(0, NUM_ROWS, size=(BATCHES, 3, 2)).astype(np.int64)
    ids[:, 0, 0] = 1  # every batch looks id 1 up: a row updated every step
    return ids, rng.rand(BATCHES, 3).astype(np.float32)


class PipelineOneRankTest(tf.test.TestCase, parameterized.TestCase):
    """The pipeline built by hand, Horovod in this process."""

    def setUp(self):
        super().setUp()
        self.hvd = ranks_testing.import_horovod(self)

    def _train(self, staleness, pipelined, steps=BATCHES):
        """Each step's looked-up rows and loss, and the table's value before each step."""
        ids, labels = _batches()
        with tf.Graph().as_default():
            dataset = tf.data.Dataset.from_tensor_slices(({IDS: ids}, labels)).repeat()
            features, batch_labels = tf.compat.v1.data.make_one_shot_iterator(dataset).get_next()
            pipeline = None
            if pipelined:
                pipeline = pipeline_lib.ExchangePipeline(features, batch_labels, IDS, staleness)
                features, batch_labels = pipeline.current()
            table = table_lib.ShardedEmbedding("table", NUM_ROWS, WIDTH, 0, 1, self.hvd, id_capacity=0,
                                               initializer=tf.compat.v1.random_normal_initializer(seed=2))
            looked_up = tf.identity(features[IDS])
            rows = pipeline.lookup([table], looked_up)[0] if pipeline else table.lookup(looked_up)
            loss = tf.reduce_sum(tf.square(tf.reduce_sum(rows, axis=[1, 2]) - batch_labels))
            train = tf.compat.v1.train.GradientDescentOptimizer(LEARNING_RATE).minimize(loss)
            if pipeline:
                train, prime = pipeline.finish(train)
            with self.session() as session:
                ranks_testing.initialize(session)
                if pipeline:
                    session.run(prime)
                record = []
                for _ in range(steps):
                    before = session.run(table.variable)
                    got_rows, got_loss, _ = session.run([rows, loss, train])
                    record.append((got_rows, got_loss, before))
        return record

    def test_exact_pipeline_trains_as_the_step_without_it(self):
        plain, pipelined = self._train(pipeline_lib.EXACT, False), self._train(pipeline_lib.EXACT, True)
        ids, _ = _batches()
        for step, ((rows, loss, before), (p_rows, p_loss, p_before)) in enumerate(zip(plain, pipelined)):
            self.assertAllEqual(before, p_before, msg="step %d" % step)
            self.assertAllEqual(rows, p_rows, msg="step %d" % step)
            self.assertEqual(loss, p_loss, msg="step %d" % step)
            self.assertAllEqual(before[ids[step]], rows)

    def test_one_step_stale_rows_are_read_before_the_previous_update(self):
        exact, stale = self._train(pipeline_lib.EXACT, True), self._train(pipeline_lib.ONE_STEP_STALE, True)
        ids, _ = _batches()
        # Step 0 trains on the rows staged at session start: the same.
        self.assertAllEqual(exact[0][0], stale[0][0])
        for step in range(1, BATCHES):
            rows, _, before = stale[step]
            previous_before = stale[step - 1][2]
            # Rows of step t were read during step t-1, before its update.
            self.assertAllEqual(previous_before[ids[step]], rows, msg="step %d" % step)
            self.assertNotAllClose(before[ids[step]], rows, msg="step %d" % step)
        # Each update is the gradient at the stale rows, on the rows of the batch.
        _, labels = _batches()
        for step in range(BATCHES - 1):
            rows, _, before = stale[step]
            residual = 2.0 * (rows.sum(axis=(1, 2)) - labels[step])
            gradient = np.zeros_like(before)
            for example in range(ids.shape[1]):
                for field in range(ids.shape[2]):
                    gradient[ids[step, example, field]] += residual[example]
            self.assertAllClose(before - LEARNING_RATE * gradient, stale[step + 1][2], rtol=1e-5, atol=1e-5,
                                msg="step %d" % step)

    def test_staged_state_is_local_and_the_first_batch_is_staged_by_prime(self):
        ids, labels = _batches()
        with tf.Graph().as_default():
            features, batch_labels = tf.compat.v1.data.make_one_shot_iterator(
                tf.data.Dataset.from_tensor_slices(({IDS: ids}, labels))).get_next()
            pipeline = pipeline_lib.ExchangePipeline(features, batch_labels, IDS)
            current, _ = pipeline.current()
            table = table_lib.ShardedEmbedding("table", NUM_ROWS, WIDTH, 0, 1, self.hvd)
            rows = pipeline.lookup([table], current[IDS])[0]
            train, prime = pipeline.finish(tf.no_op())
            local = {v.ref() for v in tf.compat.v1.local_variables()}
            staged = [v for v in tf.compat.v1.global_variables() + tf.compat.v1.local_variables()
                      if pipeline_lib.SCOPE in v.op.name]
            self.assertTrue(staged)
            self.assertTrue(all(v.ref() in local for v in staged))
            with self.session() as session:
                ranks_testing.initialize(session)
                session.run(prime)
                self.assertAllEqual(ids[0], session.run(current[IDS]))
                session.run(train)  # stages batch 1
                self.assertAllEqual(ids[1], session.run(current[IDS]))
                self.assertEqual(rows.shape.as_list(), [3, 2, WIDTH])

    @parameterized.named_parameters(
        ("identity", lambda ids: tf.identity(ids), True),
        ("cast", lambda ids: tf.cast(ids, tf.int32), True),
        ("reshape", lambda ids: tf.reshape(ids, [-1]), True),
        ("another_tensor", lambda ids: tf.constant([[1, 2]], tf.int64), False),
        ("computed_ids", lambda ids: ids + 1, False))
    def test_which_ids_go_through_the_pipeline(self, view, expected):
        ids, labels = _batches()
        with tf.Graph().as_default():
            features, batch_labels = tf.compat.v1.data.make_one_shot_iterator(
                tf.data.Dataset.from_tensor_slices(({IDS: ids}, labels))).get_next()
            pipeline = pipeline_lib.ExchangePipeline(features, batch_labels, IDS)
            looked_up = view(pipeline.current()[0][IDS])
            self.assertEqual(expected, pipeline.looks_up_staged_ids(looked_up))
            table = table_lib.ShardedEmbedding("table", NUM_ROWS, WIDTH, 0, 1, self.hvd)
            result = pipeline.lookup([table], looked_up)
            self.assertEqual(expected, result is not None)
            if expected:
                self.assertEqual(looked_up.shape.as_list() + [WIDTH], result[0].shape.as_list())

    def test_bad_use_is_named(self):
        with tf.Graph().as_default():
            with self.assertRaisesRegex(ValueError, "needs the ids in features\\['feat_ids'\\]; the features are "
                                                    "\\['other'\\]"):
                pipeline_lib.ExchangePipeline({"other": tf.zeros([2], tf.int64)}, tf.zeros([2]), IDS)
            with self.assertRaisesRegex(ValueError, "staleness must be one of \\(0, 1\\), got 2"):
                pipeline_lib.ExchangePipeline({IDS: tf.zeros([2], tf.int64)}, tf.zeros([2]), IDS, staleness=2)
            pipeline = pipeline_lib.ExchangePipeline({IDS: tf.zeros([2], tf.int64)}, tf.zeros([2]), IDS)
            pipeline.finish(tf.no_op())
            table = table_lib.ShardedEmbedding("table", NUM_ROWS, WIDTH, 0, 1, self.hvd)
            with self.assertRaisesRegex(ValueError, "lookup after finish"):
                pipeline.lookup([table], pipeline.staged_ids)


@pytest.mark.slow
class PipelineRanksTest(ranks_testing.RanksTestCase):
    """The `hybrid` strategy at real ranks trains the same steps with and without its pipeline."""

    FIRST_STEPS, LAST_STEPS = 6, 14

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.data = os.path.join(tempfile.mkdtemp(dir=tf.compat.v1.test.get_temp_dir()), "data")
        synthetic.generate(640, cls.data, feature_size=300, shards=6, seed=3)

    SIZE = 3

    def test_every_step_equals_the_in_step_exchange_across_an_epoch_and_a_resume(self):
        data, size = self.data, self.SIZE
        train_rows = dataset.Dataset.open(data).metadata.splits[schema.TRAIN_SPLIT].rows
        self.assertGreater(self.LAST_STEPS, train_rows // size // rank_program.PIPELINE_BATCH, "no epoch boundary")
        result_dir = os.path.join(self.work_dir, "results")
        self.horovodrun(size, ["--mode=pipeline", "--data_dir=" + data, "--result_dir=" + result_dir,
                               "--first_steps=%d" % self.FIRST_STEPS, "--max_steps=%d" % self.LAST_STEPS],
                        "pipeline")
        for rank, (pipelined, in_step) in enumerate(zip(self.records(result_dir, "pipelined", size),
                                                        self.records(result_dir, "in_step", size))):
            # Both runs resumed at the first run's checkpoint and went on to the last step.
            self.assertAllEqual(list(range(1, self.LAST_STEPS + 1)), pipelined["global_steps"])
            self.assertAllEqual(in_step["global_steps"], pipelined["global_steps"])
            self.assertAllClose(in_step["losses"], pipelined["losses"], rtol=1e-6, atol=0, msg="rank %d" % rank)
            self.assertGreater(len(set(np.round(pipelined["losses"], 4))), self.LAST_STEPS // 2)


if __name__ == "__main__":
    tf.test.main()
