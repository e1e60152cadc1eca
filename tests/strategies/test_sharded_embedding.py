"""Tests of `strategies.sharded_embedding`.

The fast tests check the index math in this process, and the whole path
with Horovod in this process (one rank). The slow tests start 2 and 3 real
ranks on localhost with horovodrun (Gloo) in their own process group,
stopped with every process they started on cleanup, and compare what the
ranks recorded (`sharded_embedding_rank.py`) with a single process.
"""

import os
import shutil
import sys
import tempfile
from typing import Dict, List

import numpy as np
import pytest
import tensorflow as tf
from absl.testing import parameterized

from jobs import processes
from strategies import sharded_embedding as se
from tests.strategies import sharded_embedding_rank as rank_program

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOROVODRUN = os.path.join(os.path.dirname(sys.executable), "horovodrun")
RANK_PROGRAM = "tests.strategies.sharded_embedding_rank"
RUN_TIMEOUT_SECS = 300
STALL_SHUTDOWN_SECS = 120
STALL_WARNING = "subset of ranks"
ERROR_LINE = "Error"
ERROR_LINES_SHOWN = 10
FLOAT32_TOLERANCE = dict(rtol=1e-5, atol=1e-5)
# float16 rows: about 3 significant digits on values of order 1.
FP16_TOLERANCE = dict(rtol=0.0, atol=1e-2)


def _tempdir(test: tf.test.TestCase) -> str:
    path = tempfile.mkdtemp(dir=test.get_temp_dir())
    test.addCleanup(shutil.rmtree, path, ignore_errors=True)
    return path


def _import_horovod(test: tf.test.TestCase):
    try:
        import horovod.tensorflow as hvd  # pylint: disable=import-outside-toplevel
    except ImportError as e:
        test.skipTest("Horovod is not installed: %s" % e)
    hvd.init()
    return hvd


class IndexMathTest(tf.test.TestCase, parameterized.TestCase):
    """Ownership, shard sizes and permutations, without Horovod."""

    @parameterized.parameters((0, 1), (1, 3), (2, 3), (10, 3), (12, 4), (301, 2), (301, 3))
    def test_shards_partition_the_ids(self, num_rows, size):
        owned = [se.owned_ids(num_rows, rank, size) for rank in range(size)]
        self.assertEqual([len(ids) for ids in owned], [se.shard_rows(num_rows, rank, size) for rank in range(size)])
        self.assertAllEqual(np.arange(num_rows), np.sort(np.concatenate(owned)))
        for rank, ids in enumerate(owned):
            self.assertAllEqual(np.full(len(ids), rank), ids % size)
            self.assertAllEqual(np.arange(len(ids)), ids // size)

    @parameterized.parameters((10, 3, [4, 3, 3]), (2, 3, [1, 1, 0]), (9, 3, [3, 3, 3]), (5, 1, [5]))
    def test_shard_rows(self, num_rows, size, expected):
        self.assertEqual(expected, [se.shard_rows(num_rows, rank, size) for rank in range(size)])

    @parameterized.named_parameters(
        ("rank_too_large", (5, 3, 3), "rank must be in \\[0, size=3\\), got rank=3"),
        ("negative_rank", (5, -1, 3), "got rank=-1"),
        ("no_ranks", (5, 0, 0), "number of ranks must be >= 1, got size=0"),
        ("negative_rows", (-1, 0, 2), "num_rows must be >= 0, got -1"),
    )
    def test_bad_topology_is_named(self, args, message):
        with self.assertRaisesRegex(ValueError, message):
            se.shard_rows(*args)

    @parameterized.parameters((tf.int32, 2), (tf.int64, 3), (tf.int64, 1))
    def test_owner_and_local_row_maps(self, dtype, size):
        ids = np.array([[0, 1, 2], [7, 300, 299]])
        owner, row = self.evaluate([se.owner_of(tf.constant(ids, dtype), size),
                                    se.local_row_of(tf.constant(ids, dtype), size)])
        self.assertEqual(tf.int32, se.owner_of(tf.constant(ids, dtype), size).dtype)
        self.assertAllEqual(ids % size, owner)
        self.assertAllEqual(ids // size, row)
        for rank in range(size):
            mine = owner == rank
            self.assertAllEqual(ids[mine], se.owned_ids(301, rank, size)[row[mine]])

    @parameterized.parameters((301, 2), (301, 3), (10, 4), (3, 5))
    def test_rank_order_and_id_positions_are_inverse(self, num_rows, size):
        order = se.rank_order(num_rows, size)
        positions = se.id_order_positions(num_rows, size)
        self.assertAllEqual(np.arange(num_rows), order[positions])
        self.assertAllEqual(np.arange(num_rows), positions[order])
        self.assertAllEqual(positions, self.evaluate(se.id_order_positions_tensor(num_rows, size)))
        full = np.random.RandomState(0).randn(num_rows, 2)
        concatenated = np.concatenate([full[se.owned_ids(num_rows, rank, size)] for rank in range(size)])
        self.assertAllEqual(concatenated, full[order])
        self.assertAllEqual(full, concatenated[positions])

    def _grouped(self, ids, size, capacity):
        send, splits, positions = self.evaluate(se.group_by_owner(tf.constant(ids, tf.int64), size, capacity))
        return send, splits, positions

    @parameterized.parameters((2, None), (3, None), (3, 0), (4, 3))
    def test_group_by_owner(self, size, spare_places):
        """`spare_places`: None for no padding, else the capacity above the largest split."""
        ids = np.random.RandomState(size).permutation(40)[:14]
        counts = np.bincount(ids % size, minlength=size)
        capacity = None if spare_places is None else counts.max() + spare_places
        send, splits, positions = self._grouped(ids, size, capacity)
        places = capacity or 0
        if capacity is None:
            self.assertAllEqual(counts, splits)
            self.assertLen(send, len(ids))
            starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        else:
            self.assertAllEqual(np.full(size, capacity), splits)
            self.assertLen(send, size * capacity)
            starts = np.arange(size) * places
            unused = np.ones(len(send), bool)
            unused[positions] = False
            self.assertAllEqual(np.full(unused.sum(), se.PADDING_ROW), send[unused])
        self.assertAllEqual(ids // size, send[positions])
        owners = ids % size
        self.assertTrue(np.all(positions >= starts[owners]))
        self.assertTrue(np.all(positions < starts[owners] + counts[owners]))
        self.assertLen(set(positions), len(ids))

    def test_group_by_owner_without_ids(self):
        send, splits, positions = self._grouped(np.zeros([0], np.int64), 3, None)
        self.assertAllEqual([0, 0, 0], splits)
        self.assertEqual((0, 0), (len(send), len(positions)))

    def test_a_capacity_overflow_names_the_capacity(self):
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError, "more distinct ids for one rank than "
                                                                    "id_capacity=2.*raise id_capacity"):
            self._grouped(np.array([0, 2, 4, 1]), 2, 2)

    def test_variance_scaling_shard_has_the_full_table_spread(self):
        full_shape, shard_shape = [30000, 8], [10000, 8]
        for initializer in (tf.compat.v1.glorot_normal_initializer(seed=1),
                            tf.compat.v1.variance_scaling_initializer(2.0, "fan_in", "uniform", seed=1)):
            full = self.evaluate(initializer(full_shape))
            shard = self.evaluate(se.shard_initializer(initializer, full_shape, shard_shape, rank=1)(shard_shape))
            unscaled = self.evaluate(initializer(shard_shape))
            self.assertAllClose(full.std(), shard.std(), rtol=0.03)
            self.assertNotAllClose(full.std(), unscaled.std(), rtol=0.1)

    def test_seeded_shards_differ_by_rank(self):
        initializer = tf.compat.v1.glorot_uniform_initializer(seed=4)
        shards = [self.evaluate(se.shard_initializer(initializer, [20, 3], [10, 3], rank)([10, 3]))
                  for rank in (0, 1)]
        self.assertNotAllClose(shards[0], shards[1])

    def test_shape_free_initializers_are_kept(self):
        initializer = tf.compat.v1.random_normal_initializer(stddev=0.1)
        self.assertIs(initializer, se.shard_initializer(initializer, [20, 3], [10, 3], 0))


class OneRankTest(tf.test.TestCase, parameterized.TestCase):
    """The whole path with Horovod in this process (one rank)."""

    def setUp(self):
        super().setUp()
        self.hvd = _import_horovod(self)
        self.rank, self.size = self.hvd.rank(), self.hvd.size()

    def _table(self, name="table", width=3, **kwargs):
        with tf.compat.v1.variable_scope("scope", reuse=tf.compat.v1.AUTO_REUSE):
            return se.ShardedEmbedding(name, 10, width, self.rank, self.size, self.hvd, **kwargs)

    @parameterized.named_parameters(
        ("rows", 3, {}), ("scalars", None, {}), ("padded", 3, {"id_capacity": 12}),
        ("fp16", 3, {"exchange_fp16": True}))
    def test_lookup_equals_gather_and_trains_only_the_rows_looked_up(self, width, options):
        ids = np.array([[[1, 2], [2, 9]], [[7, 1], [0, 0]]])
        with tf.Graph().as_default():
            table = self._table(width=width, **options)
            self.assertIs(table.variable, self._table(width=width, **options).variable)
            self.assertEqual(("scope/table", "scope/table/" + se.SHARD_SUFFIX),
                             (table.full_name, table.variable.op.name))
            rows = table.lookup(tf.constant(ids))
            self.assertEqual(list(ids.shape) + ([] if width is None else [width]), rows.shape.as_list())
            loss = tf.reduce_sum(tf.square(rows))
            gradient = tf.gradients(loss, table.variable)[0]
            self.assertIsInstance(gradient, tf.IndexedSlices)
            train = tf.compat.v1.train.GradientDescentOptimizer(0.5).minimize(loss)
            with self.session() as session:
                session.run(tf.compat.v1.global_variables_initializer())
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
            together = se.lookup_together([rows_table, scalars_table], ids)
            separate = [rows_table.lookup(ids), scalars_table.lookup(ids)]
            self.assertEqual([[2, 3, 3], [2, 3]], [rows.shape.as_list() for rows in together])
            loss = tf.reduce_sum(tf.square(together[0])) + tf.reduce_sum(3.0 * together[1])
            gradients = tf.gradients(loss, [rows_table.variable, scalars_table.variable])
            with self.session() as session:
                session.run(tf.compat.v1.global_variables_initializer())
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

    def test_tables_of_other_settings_cannot_share_an_exchange(self):
        with tf.Graph().as_default():
            plain, fp16 = self._table(), self._table(name="half", exchange_fp16=True)
            self.assertFalse(se.can_share_exchange(plain, fp16))
            with self.assertRaisesRegex(ValueError, "'table' and 'half' cannot share an exchange.*separately"):
                se.lookup_together([plain, fp16], tf.constant([1, 2]))
            with self.assertRaisesRegex(ValueError, "at least one table"):
                se.lookup_together([], tf.constant([1, 2]))

    def test_a_routing_of_other_settings_is_refused(self):
        with tf.Graph().as_default():
            routing = self._table(id_capacity=4).route(tf.constant([1, 2]))
            with self.assertRaisesRegex(ValueError, "routing was made for .*id_capacity=4.*route the ids"):
                self._table(name="other").lookup(tf.constant([1, 2]), routing)

    @parameterized.named_parameters(
        ("float_ids", {}, np.array([1.0], np.float32), TypeError, "ids must be int32 or int64, got float32"),
        ("no_rows", {"num_rows": 0}, None, ValueError, "num_rows must be >= 1, got 0"),
        ("zero_width", {"width": 0}, None, ValueError, "width must be >= 1 or None, got 0"),
        ("zero_capacity", {"id_capacity": 0}, None, ValueError, "id_capacity must be >= 1 or None, got 0"),
        ("integer_table", {"dtype": tf.int32}, None, TypeError, "dtype must be floating point, got int32"),
    )
    def test_bad_input_is_named(self, overrides, ids, error, message):
        arguments = dict(name="t", num_rows=10, width=2, rank=self.rank, size=self.size, hvd=self.hvd)
        arguments.update(overrides)
        with tf.Graph().as_default():
            with self.assertRaisesRegex(error, message):
                se.ShardedEmbedding(**arguments).lookup(ids)

    def test_checkpoint_holds_full_tables_and_slots_and_restores(self):
        model_dir = _tempdir(self)
        with tf.Graph().as_default():
            table = self._table()
            dense = tf.compat.v1.get_variable("dense", [3])
            loss = tf.reduce_sum(table.lookup(tf.constant([1, 4])) * dense)
            train = rank_program.make_optimizer(rank_program.LAZY_ADAM).minimize(loss)
            checkpoint = se.ShardedCheckpoint([table], self.hvd)
            self.assertEqual(["dense", "beta1_power", "beta2_power", "dense/Adam", "dense/Adam_1"],
                             [v.op.name for v in checkpoint.replicated_variables()])
            saver = checkpoint.saver()
            with self.session() as session:
                session.run(tf.compat.v1.global_variables_initializer())
                session.run(train)
                trained = session.run({table.checkpoint_name(v): v for _, v in checkpoint.sharded_variables()})
                path = saver.save(session, os.path.join(model_dir, "model.ckpt"))
        self.assertEqual({"scope/table": [10, 3], "scope/table/Adam": [10, 3], "scope/table/Adam_1": [10, 3],
                          "dense": [3], "dense/Adam": [3], "dense/Adam_1": [3], "beta1_power": [],
                          "beta2_power": []}, dict(tf.train.list_variables(path)))
        for name, value in trained.items():
            self.assertAllEqual(value, tf.train.load_variable(path, name))
        with tf.Graph().as_default():
            table = self._table()
            tf.compat.v1.get_variable("dense", [3])
            rank_program.make_optimizer(rank_program.LAZY_ADAM).minimize(
                tf.reduce_sum(table.lookup(tf.constant([1]))))
            checkpoint = se.ShardedCheckpoint([table], self.hvd)
            hook = checkpoint.restore_hook(model_dir)
            hook.begin()
            with self.session() as session:
                session.run(tf.compat.v1.global_variables_initializer())
                hook.after_create_session(session, None)
                restored = session.run({table.checkpoint_name(v): v for _, v in checkpoint.sharded_variables()})
        for name, value in trained.items():
            self.assertAllEqual(value, restored[name])

    def test_a_checkpoint_of_another_table_shape_is_refused_on_restore(self):
        model_dir = _tempdir(self)
        with tf.Graph().as_default():
            with tf.compat.v1.variable_scope("scope"):
                tf.compat.v1.get_variable("table", [7, 3])
            with self.session() as session:
                session.run(tf.compat.v1.global_variables_initializer())
                tf.compat.v1.train.Saver().save(session, os.path.join(model_dir, "model.ckpt"))
        with tf.Graph().as_default():
            checkpoint = se.ShardedCheckpoint([self._table()], self.hvd)
            saver = checkpoint.saver()
            hook = checkpoint.restore_hook(model_dir)
            hook.begin()
            with self.session() as session:
                with self.assertRaisesRegex(tf.errors.InvalidArgumentError,
                                            "checkpoint tensor .*scope/table.* does not have the shape "
                                            "\\[10, 3\\]"):
                    saver.restore(session, tf.train.latest_checkpoint(model_dir))
                session.run(tf.compat.v1.global_variables_initializer())
                with self.assertRaisesRegex(ValueError, "scope/table: \\[7, 3\\] in the checkpoint, \\[10, 3\\] "
                                                        "expected"):
                    hook.after_create_session(session, None)

    def test_saving_by_seconds_is_refused(self):
        with tf.Graph().as_default():
            checkpoint = se.ShardedCheckpoint([self._table()], self.hvd)
            with self.assertRaisesRegex(ValueError, "save_steps must be >= 1, got None .*never by seconds"):
                se.ShardedCheckpointSaverHook(_tempdir(self), checkpoint, None, tf.compat.v1.train.Scaffold())


def reference_run(case: rank_program.Case, size: int):
    """The single-process result of a lookup case: one table, the mean of every rank's loss.

    Returns:
      rows: rows[step][rank][table] looked up before the step's update.
      final: every variable's final value by its single-process name.
    """
    initial = rank_program.initial_tables()
    with tf.Graph().as_default():
        with tf.compat.v1.variable_scope(rank_program.SCOPE):
            variables = {name: tf.compat.v1.get_variable(name, initializer=value) for name, value in initial.items()}
        optimizer = rank_program.make_optimizer(case.optimizer)
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
            session.run(tf.compat.v1.global_variables_initializer())
            rows = []
            for looked_up, train in steps:
                rows.append(session.run(looked_up))
                session.run(train)
            final = session.run({v.op.name: v for v in tracked})
    return rows, final


def assemble(shards: List[np.ndarray], num_rows: int) -> np.ndarray:
    """The full table from every rank's shard (rank r holds ids r, r + size, ...)."""
    size = len(shards)
    full = np.zeros((num_rows,) + shards[0].shape[1:], shards[0].dtype)
    for rank, shard in enumerate(shards):
        full[rank::size] = shard
    return full


class _RanksTestCase(tf.test.TestCase):
    """Runs the rank program under horovodrun in its own process group."""

    def setUp(self):
        super().setUp()
        _import_horovod(self)
        if not os.access(HOROVODRUN, os.X_OK):
            self.skipTest("no horovodrun beside %s" % sys.executable)
        self.work_dir = _tempdir(self)
        self.rank_tmp = os.path.join(self.work_dir, "tmp")
        self.log_dir = os.path.join(self.work_dir, "logs")
        os.makedirs(self.rank_tmp)

    def _horovodrun(self, size: int, flags: List[str], name: str) -> None:
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", TMPDIR=self.rank_tmp,
                   HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=str(STALL_SHUTDOWN_SECS),
                   PYTHONPATH=os.pathsep.join(filter(None, [REPO_ROOT, os.environ.get("PYTHONPATH")])))
        argv = [HOROVODRUN, "--gloo", "-np", str(size), "-H", "localhost:%d" % size,
                sys.executable, "-m", RANK_PROGRAM] + flags
        group = processes.ProcessGroup(self.log_dir)
        self.addCleanup(group.stop)
        task = group.start(name, argv, env=env)
        try:
            group.wait(timeout=RUN_TIMEOUT_SECS)
        except (processes.TaskFailedError, TimeoutError) as e:
            with open(task.log_path) as f:
                errors = [line for line in f if ERROR_LINE in line]
            self.fail("%s\nerror lines of %s:\n%s" % (e, task.log_path, "".join(errors[-ERROR_LINES_SHOWN:])))
        with open(task.log_path) as f:
            self.assertNotIn(STALL_WARNING, f.read())
        self.assertEqual([], os.listdir(self.rank_tmp), "a rank left its private directory behind")

    @staticmethod
    def _records(result_dir: str, prefix: str, size: int) -> List[Dict[str, np.ndarray]]:
        records = []
        for rank in range(size):
            with np.load(os.path.join(result_dir, "%s-rank-%d.npz" % (prefix, rank))) as record:
                records.append(dict(record))
        return records


@pytest.mark.slow
class LookupRanksTest(_RanksTestCase, parameterized.TestCase):
    """Sharded lookups and updates on real ranks equal one process's."""

    def _check_case(self, case, size, records):
        reference_rows, reference_final = reference_run(case, size)
        rows_tolerance = FP16_TOLERANCE if case.exchange_fp16 else FLOAT32_TOLERANCE
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
        final_tolerance = FP16_TOLERANCE if case.exchange_fp16 else FLOAT32_TOLERANCE
        dense_name = "%s/%s" % (rank_program.SCOPE, rank_program.DENSE)
        for name, expected in reference_final.items():
            if name == dense_name or name.startswith(dense_name + "/"):
                for record in records:
                    self.assertAllClose(expected, record["var_" + name], **final_tolerance)
            else:
                actual = assemble([record["var_" + name] for record in records], rank_program.NUM_ROWS)
                self.assertAllClose(expected, actual, **final_tolerance)
        self.assertNotAllClose(initial["v"], reference_final["%s/v" % rank_program.SCOPE])
        sharded_names = {name for name in records[0] if name.startswith("var_")}
        self.assertEqual({"var_" + name for name in reference_final}, sharded_names)

    @parameterized.parameters(2, 3)
    def test_lookups_and_updates_equal_one_process(self, size):
        result_dir = os.path.join(self.work_dir, "results")
        self._horovodrun(size, ["--mode=lookup", "--result_dir=" + result_dir], "lookup")
        for case in rank_program.CASES:
            with self.subTest(case=case.name):
                self._check_case(case, size, self._records(result_dir, case.name, size))


@pytest.mark.slow
class CheckpointRanksTest(_RanksTestCase):
    """A checkpoint written at 2 ranks restores at 3 ranks and in a plain graph."""

    SHARDED = ("model/v", "model/v/Adam", "model/v/Adam_1", "model/w", "model/w/Adam", "model/w/Adam_1")

    def _estimator(self, size, model_dir, result_dir, max_steps, predict=False):
        flags = ["--mode=estimator", "--result_dir=" + result_dir, "--model_dir=" + model_dir,
                 "--max_steps=%d" % max_steps, "--save_steps=2"] + (["--predict"] if predict else [])
        self._horovodrun(size, flags, "estimator-%d-ranks" % size)
        return self._records(result_dir, "end", size)

    def _checkpoint(self, path):
        return {name: tf.train.load_variable(path, name) for name, _ in tf.train.list_variables(path)}

    def _plain_logits(self, path):
        with tf.Graph().as_default():
            variables = rank_program.plain_variables()
            ids = rank_program.predict_ids()
            logits = rank_program.logits({spec.name: tf.gather(variables[spec.name], ids)
                                          for spec in rank_program.TABLES},
                                         variables[rank_program.DENSE], variables["bias"])
            with tf.compat.v1.Session() as session:
                tf.compat.v1.train.Saver(list(variables.values())).restore(session, path)
                return session.run(logits)

    def test_checkpoint_written_at_two_ranks_restores_at_three_and_in_a_plain_graph(self):
        model_dir = os.path.join(self.work_dir, "model")
        first_dir = os.path.join(self.work_dir, "first")
        ends = self._estimator(2, model_dir, first_dir, max_steps=4, predict=True)
        path = os.path.join(model_dir, "model.ckpt-4")
        saved = self._checkpoint(path)
        num_rows, width = rank_program.NUM_ROWS, rank_program.WIDTH
        shapes = dict(tf.train.list_variables(path))
        for name in self.SHARDED:
            self.assertEqual([num_rows] + ([width] if name.startswith("model/v") else []), shapes[name], name)
            self.assertAllEqual(assemble([end[name] for end in ends], num_rows), saved[name])
        self.assertEqual([], [name for name in shapes if se.SHARD_SUFFIX in name])
        self.assertEqual(4, saved["global_step"])

        # Every rank predicted from its own checkpoint (rank 1: its private
        # local shard); a plain single-process graph restores the same model.
        predictions = [r["logits"] for r in self._records(first_dir, "predictions", 2)]
        self.assertAllClose(predictions[0], predictions[1], **FLOAT32_TOLERANCE)
        self.assertAllClose(predictions[0], self._plain_logits(path), **FLOAT32_TOLERANCE)

        second_dir = os.path.join(self.work_dir, "second")
        ends = self._estimator(3, model_dir, second_dir, max_steps=6)
        starts = self._records(second_dir, "dump", 3)
        for rank, start in enumerate(starts):
            self.assertEqual(4, start["global_step"])
            for name in self.SHARDED:
                self.assertAllEqual(saved[name][se.owned_ids(num_rows, rank, 3)], start[name], name)
        # The save at session start (step 4, gathered from 3 ranks) rewrote the same values.
        rewritten = self._checkpoint(path)
        self.assertEqual(sorted(saved), sorted(rewritten))
        for name, value in saved.items():
            self.assertAllEqual(value, rewritten[name], name)
        final = self._checkpoint(os.path.join(model_dir, "model.ckpt-6"))
        self.assertEqual(6, final["global_step"])
        for name in self.SHARDED:
            self.assertAllEqual(assemble([end[name] for end in ends], num_rows), final[name])
        self.assertNotAllClose(saved["model/v"], final["model/v"])


if __name__ == "__main__":
    tf.test.main()
