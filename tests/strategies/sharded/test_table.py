"""Tests of `strategies.sharded.table`: a sharded table's lookups and updates, alone and side by side.

The fast tests run Horovod in this process (one rank). The slow one starts 3
real ranks on localhost with horovodrun (Gloo), a first, a middle and a last
rank over a table of uneven shards, and compares what the ranks recorded
(`rank_program.py`) with a single process.
"""

import functools
import os

import numpy as np
import pytest
import tensorflow as tf
from absl.testing import parameterized

from strategies import large_batch
from strategies.sharded import table as table_lib
from tests.strategies.sharded import rank_program, ranks_testing


class OneRankTest(tf.test.TestCase, parameterized.TestCase):
    """The whole path with Horovod in this process (one rank)."""

    def setUp(self):
        super().setUp()
        self.hvd = ranks_testing.import_horovod(self)
        self.rank, self.size = self.hvd.rank(), self.hvd.size()

    def _table(self, name="table", width=3, **kwargs):
        with tf.compat.v1.variable_scope("scope", reuse=tf.compat.v1.AUTO_REUSE):
            return table_lib.ShardedEmbedding(name, 10, width, self.rank, self.size, self.hvd, **kwargs)

    @parameterized.named_parameters(
        ("rows", 3, {}), ("scalars", None, {}), ("padded", 3, {"id_capacity": 12}),
        ("places_from_the_batch", 3, {"id_capacity": 0}), ("fp16", 3, {"exchange_fp16": True}))
    def test_lookup_equals_gather_and_trains_only_the_rows_looked_up(self, width, options):
        ids = np.array([[[1, 2], [2, 9]], [[7, 1], [0, 0]]])
        with tf.Graph().as_default():
            table = self._table(width=width, **options)
            self.assertIs(table.variable, self._table(width=width, **options).variable)
            self.assertEqual(("scope/table", "scope/table/" + table_lib.SHARD_SUFFIX),
                             (table.full_name, table.variable.op.name))
            rows = table.lookup(tf.constant(ids))
            self.assertEqual(list(ids.shape) + ([] if width is None else [width]), rows.shape.as_list())
            loss = tf.reduce_sum(tf.square(rows))
            gradient = tf.gradients(loss, table.variable)[0]
            self.assertIsInstance(gradient, tf.IndexedSlices)
            train = tf.compat.v1.train.GradientDescentOptimizer(0.5).minimize(loss)
            with self.session() as session:
                ranks_testing.initialize(session)
                before = session.run(table.variable)
                values, stats, indices = session.run([rows, table.lookup_stats, gradient.indices])
                session.run(train)
                after = session.run(table.variable)
        expected = before[ids]
        if options.get("exchange_fp16"):
            expected = expected.astype(np.float16).astype(np.float32)
        self.assertAllEqual(expected, values)
        self.assertEqual((5, 5), (stats.distinct_ids, stats.rows_served))
        self.assertAllEqual([0, 1, 2, 7, 9], np.unique(indices))
        untouched = [3, 4, 5, 6, 8]
        self.assertAllEqual(before[untouched], after[untouched])
        self.assertNotAllClose(before[[0, 1]], after[[0, 1]])

    @parameterized.named_parameters(("plain", {}), ("padded", {"id_capacity": 12}), ("fp16", {"exchange_fp16": True}))
    def test_lookup_together_equals_separate_lookups(self, options):
        with tf.Graph().as_default():
            ids = tf.constant([[1, 2, 2], [9, 1, 0]])
            rows_table, scalars_table = self._table(**options), self._table(name="scalars", width=None, **options)
            together = table_lib.lookup_together([rows_table, scalars_table], ids)
            separate = [rows_table.lookup(ids), scalars_table.lookup(ids)]
            self.assertEqual([[2, 3, 3], [2, 3]], [rows.shape.as_list() for rows in together])
            loss = tf.reduce_sum(tf.square(together[0])) + tf.reduce_sum(3.0 * together[1])
            gradients = tf.gradients(loss, [rows_table.variable, scalars_table.variable])
            with self.session() as session:
                ranks_testing.initialize(session)
                got, want, (rows_gradient, scalars_gradient), tables = session.run(
                    [together, separate, [tf.convert_to_tensor(g) for g in gradients],
                     [rows_table.variable, scalars_table.variable]])
        for got_rows, want_rows in zip(got, want):
            self.assertAllEqual(want_rows, got_rows)
        counts = np.bincount([1, 2, 2, 9, 1, 0], minlength=10)
        self.assertAllClose(2.0 * counts[:, None] * tables[0] if not options.get("exchange_fp16")
                            else 2.0 * counts[:, None] * tables[0].astype(np.float16).astype(np.float32),
                            rows_gradient, rtol=1e-3)
        self.assertAllClose(3.0 * counts, scalars_gradient)

    @parameterized.named_parameters(("plain", {}), ("padded", {"id_capacity": 12}))
    def test_a_transform_sees_each_place_once_with_its_count(self, options):
        ids = np.array([[1, 2, 2], [9, 1, 1]])
        seen = []

        def transform(rows, counts):
            seen.append((rows, counts))
            return 2.0 * rows

        with tf.Graph().as_default():
            rows_table, scalars_table = self._table(**options), self._table(name="scalars", width=None, **options)
            together = table_lib.lookup_together([rows_table, scalars_table], tf.constant(ids), transform=transform)
            plain = [rows_table.lookup(tf.constant(ids)), scalars_table.lookup(tf.constant(ids))]
            self.assertLen(seen, 2)
            with self.session() as session:
                ranks_testing.initialize(session)
                got, want, (rows, counts), (scalars, _) = session.run([together, plain] + seen)
        for got_rows, want_rows in zip(got, want):
            self.assertAllEqual(2.0 * want_rows, got_rows)
        self.assertEqual([3, 12 * self.size][bool(options)], len(counts))
        self.assertEqual(ids.size, counts.sum())
        self.assertCountEqual([3, 2, 1], counts[counts > 0])
        self.assertEqual((len(counts), 3), rows.shape)
        self.assertEqual((len(counts),), scalars.shape)

    @parameterized.named_parameters(("plain", {}), ("padded", {"id_capacity": 12}))
    def test_cowclip_on_the_places_equals_cowclip_on_every_occurrence(self, options):
        ids_values = [[1, 2, 2, 9], [9, 1, 1, 1], [0, 2, 9, 9]]
        upstream = np.random.RandomState(3).randn(3, 4, 3).astype(np.float32) * 5.0
        rule = large_batch.CowClip(global_batch=64, base_batch=16, warmup_steps=0, clip_ratio=0.3,
                                   gradient_share=0.5)
        with tf.Graph().as_default():
            ids = tf.constant(ids_values)
            table = self._table(initializer=tf.compat.v1.random_normal_initializer(seed=4), **options)
            on_places = table_lib.lookup_together([table], ids, transform=rule.distinct_rows)[0]
            on_occurrences = rule.lookup_rows(table.lookup(ids), ids)
            gradients = [tf.convert_to_tensor(tf.gradients(tf.reduce_sum(rows * upstream), table.variable)[0])
                         for rows in (on_places, on_occurrences)]
            unclipped = tf.convert_to_tensor(tf.gradients(tf.reduce_sum(table.lookup(ids) * upstream),
                                                          table.variable)[0])
            with self.session() as session:
                ranks_testing.initialize(session)
                (got, want), plain = session.run([gradients, unclipped])
        self.assertAllClose(want, got, rtol=1e-5, atol=1e-6)
        self.assertNotAllClose(plain, got)  # the rule clips some of these ids

    def test_tables_of_other_settings_cannot_share_an_exchange(self):
        with tf.Graph().as_default():
            plain, fp16 = self._table(), self._table(name="half", exchange_fp16=True)
            self.assertFalse(table_lib.can_share_exchange(plain, fp16))
            with self.assertRaisesRegex(ValueError, "'table' and 'half' cannot share an exchange.*separately"):
                table_lib.lookup_together([plain, fp16], tf.constant([1, 2]))
            with self.assertRaisesRegex(ValueError, "at least one table"):
                table_lib.lookup_together([], tf.constant([1, 2]))

    def test_a_routing_of_other_settings_is_refused(self):
        with tf.Graph().as_default():
            routing = self._table(id_capacity=4).route(tf.constant([1, 2]))
            with self.assertRaisesRegex(ValueError, "routing was made for .*1, True, tf.int32.*this table has "
                                                    ".*1, False, tf.int32.*route the ids"):
                self._table(name="other").lookup(tf.constant([1, 2]), routing)

    def test_an_id_past_the_table_is_named(self):
        with tf.Graph().as_default():
            rows = self._table().lookup(tf.constant([3, 10]))
            with self.session() as session:
                ranks_testing.initialize(session)
                with self.assertRaisesRegex(tf.errors.InvalidArgumentError,
                                            "table.{1,2}: an id is >= its 10 rows .*check --feature_size"):
                    session.run(rows)

    @parameterized.named_parameters(
        ("float_ids", {}, np.array([1.0], np.float32), TypeError, "ids must be int32 or int64, got float32"),
        ("no_rows", {"num_rows": 0}, None, ValueError, "num_rows must be >= 1, got 0"),
        ("zero_width", {"width": 0}, None, ValueError, "width must be >= 1 or None, got 0"),
        ("negative_capacity", {"id_capacity": -1}, None, ValueError, "id_capacity must be >= 0 or None, got -1"),
        ("integer_table", {"dtype": tf.int32}, None, TypeError, "dtype must be floating point, got int32"),
    )
    def test_bad_input_is_named(self, overrides, ids, error, message):
        arguments = dict(name="t", num_rows=10, width=2, rank=self.rank, size=self.size, hvd=self.hvd)
        arguments.update(overrides)
        with tf.Graph().as_default():
            with self.assertRaisesRegex(error, message):
                table_lib.ShardedEmbedding(**arguments).lookup(ids)


def reference_run(case: rank_program.Case, size: int):
    """The single-process result of a lookup case: one table, the mean of every rank's loss.

    It depends on the case's optimizer alone (the exchange options are what
    the ranks are compared across): computed once per optimizer and size.

    Returns:
      rows: rows[step][rank][table] looked up before the step's update.
      final: every variable's final value by its single-process name.
    """
    return _reference_run(case.optimizer, size)


@functools.lru_cache(maxsize=None)
def _reference_run(optimizer_name: str, size: int):
    initial = rank_program.initial_tables()
    with tf.Graph().as_default():
        with tf.compat.v1.variable_scope(rank_program.SCOPE):
            variables = {name: tf.compat.v1.get_variable(name, initializer=value) for name, value in initial.items()}
        optimizer = rank_program.make_optimizer(optimizer_name)
        steps = []
        for step in range(rank_program.STEPS):
            looked_up = []
            losses = []
            for rank in range(size):
                ids = rank_program.step_ids(step, rank, size)
                rows = {spec.name: tf.gather(variables[spec.name], ids) for spec in rank_program.TABLES}
                looked_up.append(rows)
                losses.append(rank_program.rank_loss(rows, variables[rank_program.DENSE], step, rank))
            steps.append((looked_up, optimizer.minimize(tf.add_n(losses) / size)))
        tracked = list(variables.values())
        tracked += [optimizer.get_slot(v, slot) for v in variables.values() for slot in optimizer.get_slot_names()]
        tracked = [v for v in tracked if v is not None]
        with tf.compat.v1.Session() as session:
            ranks_testing.initialize(session)
            rows = []
            for looked_up, train in steps:
                rows.append(session.run(looked_up))
                session.run(train)
            final = session.run({v.op.name: v for v in tracked})
    return rows, final



@pytest.mark.slow
class LookupRanksTest(ranks_testing.RanksTestCase):
    """Sharded lookups and updates on real ranks equal one process's."""

    def _check_case(self, case, size, records):
        reference_rows, reference_final = reference_run(case, size)
        rows_tolerance = ranks_testing.FP16_TOLERANCE if case.exchange_fp16 else ranks_testing.FLOAT32_TOLERANCE
        initial = rank_program.initial_tables()
        for step in range(rank_program.STEPS):
            batches = [rank_program.step_ids(step, rank, size) for rank in range(size)]
            distinct = [np.unique(ids) for ids in batches]
            for rank, record in enumerate(records):
                for spec in rank_program.TABLES:
                    self.assertAllClose(reference_rows[step][rank][spec.name],
                                        record["rows_%s_%d" % (spec.name, step)], **rows_tolerance)
                served = np.unique(np.concatenate([ids[ids % size == rank] for ids in distinct]))
                self.assertEqual(len(distinct[rank]), record["distinct_ids_%d" % step])
                self.assertEqual(sum(np.sum(ids % size == rank) for ids in distinct),
                                 record["rows_served_%d" % step])
                self.assertAllEqual(served // size, np.unique(record["gradient_rows_%d" % step]))
            if step == rank_program.ONE_OWNER_STEP:
                self.assertEqual([0] * (size - 1), [r["rows_served_%d" % step] for r in records[:-1]])
        if case.exchange_fp16:
            # The rows crossed the exchange as float16.
            ids = rank_program.step_ids(rank_program.RANDOM_STEP, 0, size)
            self.assertAllEqual(initial["v"][ids].astype(np.float16).astype(np.float32),
                                records[0]["rows_v_%d" % rank_program.RANDOM_STEP])
        final_tolerance = ranks_testing.FP16_TOLERANCE if case.exchange_fp16 else ranks_testing.FLOAT32_TOLERANCE
        dense_name = "%s/%s" % (rank_program.SCOPE, rank_program.DENSE)
        for name, expected in reference_final.items():
            if name == dense_name or name.startswith(dense_name + "/"):
                for record in records:
                    self.assertAllClose(expected, record["var_" + name], **final_tolerance)
            else:
                actual = ranks_testing.assemble([record["var_" + name] for record in records], rank_program.NUM_ROWS)
                self.assertAllClose(expected, actual, **final_tolerance)
        self.assertNotAllClose(initial["v"], reference_final["%s/v" % rank_program.SCOPE])
        sharded_names = {name for name in records[0] if name.startswith("var_")}
        self.assertEqual({"var_" + name for name in reference_final}, sharded_names)

    SIZE = 3

    def test_lookups_and_updates_equal_one_process(self):
        size = self.SIZE
        result_dir = os.path.join(self.work_dir, "results")
        self.horovodrun(size, ["--mode=lookup", "--result_dir=" + result_dir], "lookup")
        for case in rank_program.CASES:
            with self.subTest(case=case.name):
                self._check_case(case, size, self.records(result_dir, case.name, size))



if __name__ == "__main__":
    tf.test.main()
