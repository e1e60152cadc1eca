"""Tests of `strategies.memory_estimate` and of what each strategy says its processes hold.

A model's state is measured from its real graph (the built-in DeepFM through
its real model_fn) and checked against bytes computed by hand; each
strategy's share of it is asked of the real adapter.
"""

import math
import time

import tensorflow as tf
from absl.testing import parameterized

import strategies
from deepfm import config, models
from deepfm.models import ctr
from strategies import memory_estimate, topology
from tests.strategies import test_ps

FLOAT = 4
INT64 = 8
FEATURE_SIZE = 10_001
FIELD_SIZE = 5
EMBEDDING = 4
LAYERS = (8, 4)
BATCH = 64
# DeepFM's dense parameters at these sizes: fm_bias, each layer's kernel and bias, the output layer.
DENSE_PARAMS = 1 + (FIELD_SIZE * EMBEDDING * 8 + 8) + (8 * 4 + 4) + (4 * 1 + 1)
# Slots each optimizer keeps per variable.
SLOTS_PER_VARIABLE = {"adam": 2, "lazy_adam": 2, "adagrad": 1, "momentum": 1, "ftrl": 2, "sgd": 0}
# The optimizer's own scalars (Adam's beta powers) besides the slots.
OPTIMIZER_SCALARS = {"adam": 2, "lazy_adam": 2}
# The trainable variable of a model_fn that its loss never reaches.
UNREACHED = 7
# The global step, an int64.
GLOBAL_STEP_BYTES = INT64
# The measure of a 20M-row model may grow this process by at most this (its tables alone are 2.64 GB).
MAX_MEASURE_GROWTH_BYTES = 200 * 1000 ** 2
MAX_MEASURE_SECONDS = 30
LARGE_FEATURE_SIZE = 20_000_000
LARGE_EMBEDDING = 32


def small_model(optimizer="lazy_adam", **overrides):
    values = dict(feature_size=FEATURE_SIZE, field_size=FIELD_SIZE, embedding_size=EMBEDDING, deep_layers=LAYERS,
                  dropout=(0.0, 0.0), optimizer=optimizer)
    values.update(overrides)
    return config.ModelConfig(**values)


def state_of(model):
    return memory_estimate.model_state(models.get(model.model), ctr.model_params(model), model.field_size)


def resident_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


class ModelStateTest(parameterized.TestCase, tf.test.TestCase):

    @parameterized.parameters(*sorted(SLOTS_PER_VARIABLE))
    def test_deepfm_state_equals_the_bytes_computed_by_hand(self, optimizer):
        state = state_of(small_model(optimizer))
        slots = SLOTS_PER_VARIABLE[optimizer]
        table_bytes = FEATURE_SIZE * (EMBEDDING + 1) * FLOAT
        self.assertEqual(["deepfm_model/fm_w", "deepfm_model/fm_v"], [table.name for table in state.tables])
        self.assertEqual([FEATURE_SIZE] * 2, [table.rows for table in state.tables])
        self.assertEqual(table_bytes, state.table_bytes)
        self.assertEqual(slots * table_bytes, state.table_slot_bytes)
        self.assertEqual(DENSE_PARAMS * FLOAT, state.dense_bytes)
        self.assertEqual(slots * DENSE_PARAMS * FLOAT + OPTIMIZER_SCALARS.get(optimizer, 0) * FLOAT
                         + GLOBAL_STEP_BYTES, state.dense_slot_bytes)
        self.assertEqual(FIELD_SIZE * EMBEDDING * 8 * FLOAT, state.largest_dense_bytes)
        self.assertEqual((EMBEDDING + 1) * FLOAT, state.row_bytes)

    def test_lazy_adam_triples_the_tables_as_the_whole_model_holds_them(self):
        state = state_of(small_model())
        whole = strategies.get(strategies.StrategyConfig(name="single")).memory(state, BATCH * FIELD_SIZE).estimates()
        memory = whole[topology.ROLE_WORKER]
        self.assertEqual([topology.ROLE_WORKER], list(whole))
        self.assertEqual(FEATURE_SIZE * (EMBEDDING + 1) * FLOAT * 3 + DENSE_PARAMS * FLOAT * 3 + 2 * FLOAT
                         + GLOBAL_STEP_BYTES, memory.state)
        self.assertEqual(0, memory.buffers)
        self.assertEqual(math.ceil(memory_estimate.STATE_FACTOR * memory.state) + memory_estimate.RUNTIME_BYTES,
                         memory.needed)

    def test_a_20m_row_model_is_measured_without_allocating_it(self):
        model = config.ModelConfig(feature_size=LARGE_FEATURE_SIZE, field_size=39, embedding_size=LARGE_EMBEDDING)
        before = resident_bytes()
        start = time.monotonic()
        state = state_of(model)
        self.assertLess(time.monotonic() - start, MAX_MEASURE_SECONDS)
        self.assertLess(resident_bytes() - before, MAX_MEASURE_GROWTH_BYTES)
        # 20M ids x (32 factors + 1 weight) x 4 bytes: 2.64 GB of tables; lazy_adam's two slots triple it.
        self.assertEqual(2_640_000_000, state.table_bytes)
        self.assertEqual(7_920_000_000, state.table_bytes + state.table_slot_bytes)

    def test_the_optimizer_makes_its_slots_without_the_gradients_graph(self):
        # A model_fn of its own: a table of weights, a dense scale, and a trainable variable the loss never reaches.
        graphs = []

        def model_fn(features, labels, mode, params):
            context = strategies.ModelContext.of(params)
            graphs.append(tf.compat.v1.get_default_graph())
            weights = context.embedding("weights", FEATURE_SIZE).lookup(features["feat_ids"])
            scale = tf.compat.v1.get_variable("scale", [], initializer=tf.compat.v1.ones_initializer())
            tf.compat.v1.get_variable("unreached", [UNREACHED], initializer=tf.compat.v1.zeros_initializer())
            logits = scale * tf.reduce_sum(weights * features["feat_vals"], axis=1)
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))
            train_op = context.minimize(loss, tf.compat.v1.train.AdamOptimizer, 0.01)
            return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)

        state = memory_estimate.model_state(model_fn, {}, FIELD_SIZE)
        (graph,) = graphs
        self.assertEqual([], [op.name for op in graph.get_operations() if op.name.startswith("gradients")])
        self.assertEqual(FEATURE_SIZE * FLOAT, state.table_bytes)
        self.assertEqual(2 * state.table_bytes, state.table_slot_bytes)
        # Adam's two slots of every dense variable, the unreached one's too (the estimate errs up), its two beta
        # powers and the global step.
        self.assertEqual((1 + UNREACHED) * FLOAT, state.dense_bytes)
        self.assertEqual(2 * state.dense_bytes + OPTIMIZER_SCALARS["adam"] * FLOAT + GLOBAL_STEP_BYTES,
                         state.dense_slot_bytes)

    def test_dcn_tables_are_found_through_the_model_context(self):
        state = state_of(small_model(model="dcn", cross_layers=2))
        self.assertEqual(["dcn_model/linear", "dcn_model/embeddings"], [table.name for table in state.tables])
        self.assertEqual(FEATURE_SIZE * (EMBEDDING + 1) * FLOAT, state.table_bytes)
        self.assertGreater(state.dense_bytes, 0)


class StrategySharesTest(tf.test.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.state = state_of(small_model())
        cls.ids = BATCH * FIELD_SIZE

    def test_hybrid_at_2_ranks_holds_half_of_each_table_every_dense_variable_and_the_exchange(self):
        hybrid = strategies.get(strategies.StrategyConfig(name="hybrid"))
        rank = hybrid.memory(self.state, self.ids).estimates(2)[topology.ROLE_WORKER]
        half_rows = math.ceil(FEATURE_SIZE / 2)
        self.assertEqual(half_rows * (EMBEDDING + 1) * FLOAT + self.state.dense_bytes, rank.variables)
        self.assertEqual(2 * half_rows * (EMBEDDING + 1) * FLOAT + self.state.dense_slot_bytes, rank.slots)
        self.assertEqual(self.ids * (EMBEDDING + 1) * FLOAT * memory_estimate.EXCHANGE_BUFFER_COPIES, rank.buffers)
        one = hybrid.memory(self.state, self.ids).estimates(1)[topology.ROLE_WORKER]
        self.assertEqual(self.state.variable_bytes, one.variables)

    def test_ps_workers_hold_no_table_and_each_server_its_partition(self):
        servers = 2
        ps = test_ps.make_strategy(self, "chief")
        estimates = ps.memory(self.state, self.ids).estimates(servers)
        worker, server = estimates[topology.ROLE_WORKER], estimates[topology.ROLE_PS]
        self.assertEqual(self.state.dense_bytes, worker.variables)
        self.assertEqual(0, worker.slots)
        self.assertEqual(self.state.exchange_bytes(self.ids), worker.buffers)
        half_rows = math.ceil(FEATURE_SIZE / servers)
        # Whole dense variables, each on the least loaded server: at most an even share plus the largest one.
        dense_share = min(1.0, 1 / servers + self.state.largest_dense_bytes / self.state.dense_bytes)
        self.assertEqual(half_rows * (EMBEDDING + 1) * FLOAT + round(dense_share * self.state.dense_bytes),
                         server.variables)
        self.assertEqual(2 * half_rows * (EMBEDDING + 1) * FLOAT + round(dense_share * self.state.dense_slot_bytes),
                         server.slots)

    def test_ps_without_a_scale_counts_the_servers_of_tf_config(self):
        ps = test_ps.set_up_strategy(self, "ps", 1)
        self.assertEqual(ps.memory(self.state, self.ids).estimates(len(test_ps.CLUSTER["ps"])),
                         ps.memory(self.state, self.ids).estimates())

    def test_mirrored_on_cpu_holds_a_copy_per_replica(self):
        mirrored = strategies.get(strategies.make_config("mirrored", num_devices=3, device_type="cpu"))
        memory = mirrored.memory(self.state, self.ids).estimates()[topology.ROLE_WORKER]
        self.assertEqual(3 * self.state.variable_bytes, memory.variables)
        self.assertEqual(3 * self.state.slot_bytes, memory.slots)

    def test_the_tower_method_shares_one_copy(self):
        tower = strategies.get(strategies.make_config("tower", num_devices=3, device_type="cpu"))
        memory = tower.memory(self.state, self.ids).estimates()[topology.ROLE_WORKER]
        self.assertEqual(self.state.variable_bytes + self.state.slot_bytes, memory.state)

    def test_the_smallest_scale_is_the_first_count_that_fits(self):
        hybrid = strategies.get(strategies.StrategyConfig(name="hybrid"))

        def needed(count):
            return memory_estimate.largest(hybrid.memory(self.state, self.ids).estimates(count)).needed
        budget = needed(5)
        self.assertGreater(needed(4), budget)
        self.assertEqual(5, memory_estimate.smallest_scale(
            lambda count: hybrid.memory(self.state, self.ids).estimates(count), budget))
        self.assertIsNone(memory_estimate.smallest_scale(
            lambda count: hybrid.memory(self.state, self.ids).estimates(count), memory_estimate.RUNTIME_BYTES))

    def test_the_export_holds_every_weight_and_no_slot(self):
        export = memory_estimate.export_memory(self.state)
        self.assertEqual(self.state.variable_bytes, export.variables)
        self.assertEqual(0, export.slots + export.buffers)


class FormatTest(tf.test.TestCase):

    def test_bytes_are_written_in_decimal_units(self):
        self.assertEqual("7.92 GB", memory_estimate.format_bytes(7_920_000_000))
        self.assertEqual("600.00 MB", memory_estimate.format_bytes(600 * 1000 ** 2))
        self.assertEqual("12 B", memory_estimate.format_bytes(12))

    def test_a_process_describes_its_parts(self):
        memory = memory_estimate.ProcessMemory(variables=2_640_000_000, slots=5_280_000_000, buffers=1000)
        self.assertEqual("11.00 GB (1.3 x (variables 2.64 GB + slots 5.28 GB) + exchange buffers 1.00 kB + runtime "
                         "%s)" % memory_estimate.format_bytes(memory_estimate.RUNTIME_BYTES), memory.describe())


if __name__ == "__main__":
    tf.test.main()
