"""Tests of the mirrored strategy (tf.distribute.MirroredStrategy under tf.estimator)."""

import os
import textwrap

import numpy as np
import pytest
import tensorflow as tf
from absl.testing import parameterized

import strategies
from strategies import devices as devices_lib
from strategies import mirrored
from tests import command_line, paths
from tests.strategies import replica_testing as rt

REPLICAS = 2
PER_REPLICA_BATCH = 64
TRAIN_STEPS = 150
MIN_AUC = 0.9
EVAL_BATCH = 300
# Four evaluation batches, the last a single row: the second step of two
# replicas has one full batch and one of a single row.
EVAL_ROWS = 3 * EVAL_BATCH + 1
REPO_ROOT = paths.REPO_ROOT
SUBPROCESS_TIMEOUT_S = 120


def mirrored_strategy(num_devices=REPLICAS, device_type="cpu", **kwargs) -> strategies.Strategy:
    strategy = strategies.get(strategies.make_config(
        name="mirrored", num_devices=num_devices, device_type=device_type, **kwargs))
    strategy.setup()
    return strategy


class MirroredConfigTest(tf.test.TestCase, parameterized.TestCase):

    def test_is_registered(self):
        self.assertIn("mirrored", strategies.names())

    def test_cpu_replicas_leave_out_cpu0(self):
        strategy = mirrored_strategy()
        strategy.prepare(strategies.Plan(model_dir=self.get_temp_dir()))
        run_config = strategy.run.run_config
        distribution = run_config.train_distribute
        self.assertIsInstance(distribution, tf.distribute.MirroredStrategy)
        self.assertIs(run_config.eval_distribute, distribution)
        self.assertEqual(distribution.num_replicas_in_sync, REPLICAS)
        self.assertEqual(strategy.topology.replicas_in_sync, REPLICAS)
        self.assertEqual(strategy.input_plan().batches_per_step, REPLICAS)
        self.assertEqual([tf.DeviceSpec.from_string(d).device_index for d in distribution.extended.worker_devices],
                         [1, 2])
        self.assertEqual(run_config.session_config.device_count["CPU"], REPLICAS + 1)
        self.assertTrue(run_config.session_config.allow_soft_placement)

    def test_builds_after_an_estimator_ran_in_the_process(self):
        # A fresh process: once one MirroredStrategy exists, later ones build
        # even where the first would have failed.
        script = textwrap.dedent("""
            import strategies
            from tests.strategies import replica_testing as rt
            single = strategies.get(strategies.make_config(name="single"))
            rt.build_estimator(single, %r).train(rt.input_fn(rt.planted_rows(64), 64), max_steps=1)
            strategy = strategies.get(strategies.make_config(name="mirrored", num_devices=2, device_type="cpu"))
            strategy.setup()
            print("replicas in sync:", strategy.distribution().num_replicas_in_sync)
            """ % self.get_temp_dir())
        # From the repository's root, where `tests` (which the virtual environment does not install) imports.
        result = command_line.run(["python", "-c", script], REPO_ROOT, timeout=SUBPROCESS_TIMEOUT_S)
        self.assertEqual(result.returncode, 0, result.stderr[-3000:])
        self.assertIn("replicas in sync: %d" % REPLICAS, result.stdout)

    @parameterized.parameters(
        ("reduction_to_one_device", tf.distribute.ReductionToOneDevice),
        ("hierarchical_copy", tf.distribute.HierarchicalCopyAllReduce),
        ("nccl", tf.distribute.NcclAllReduce),
    )
    def test_cross_device_ops_names(self, name, cls):
        self.assertIsInstance(mirrored.make_cross_device_ops(name), cls)

    def test_unknown_cross_device_ops_is_refused(self):
        with self.assertRaisesRegex(ValueError, "--cross_device_ops .*'ring'"):
            mirrored.make_cross_device_ops("ring")

    def test_nccl_on_cpu_is_refused_at_validation(self):
        with self.assertRaisesRegex(ValueError, "--cross_device_ops nccl needs GPU replicas.*CPU.*/cpu:1,/cpu:2"):
            mirrored_strategy(cross_device_ops="nccl")

    def test_gpu_without_gpus_is_refused(self):
        if devices_lib.visible_gpus():
            self.skipTest("a GPU is visible; the refusal needs a host without one")
        with self.assertRaisesRegex(ValueError, "--device_type gpu"):
            mirrored_strategy(device_type="gpu")


class MirroredTrainingTest(tf.test.TestCase, parameterized.TestCase):

    @parameterized.parameters("reduction_to_one_device", "hierarchical_copy")
    def test_trains_two_cpu_replicas(self, cross_device_ops):
        rt.assert_learns(self, mirrored_strategy(cross_device_ops=cross_device_ops), self.get_temp_dir(),
                         PER_REPLICA_BATCH, TRAIN_STEPS, EVAL_ROWS, EVAL_BATCH, MIN_AUC)

    def test_each_step_reads_one_dataset_batch_per_replica(self):
        rows = 1024
        strategy = mirrored_strategy()
        estimator = rt.build_estimator(strategy, self.get_temp_dir())
        batch = strategy.input_plan().batch_per_input_pipeline(PER_REPLICA_BATCH)
        estimator.train(rt.input_fn(rt.planted_rows(rows), batch, drop_remainder=True))
        self.assertEqual(estimator.get_variable_value("global_step"), rows // (PER_REPLICA_BATCH * REPLICAS))

    def test_one_sgd_step_of_replicas_equals_one_step_of_single(self):
        model = rt.model_config(optimizer="sgd", learning_rate=0.5)
        batch = rt.planted_rows(REPLICAS * PER_REPLICA_BATCH)
        def single_strategy():
            return strategies.get(strategies.make_config(name="single"))
        start_dir = os.path.join(self.get_temp_dir(), "start")
        rt.build_estimator(single_strategy(), start_dir, model).train(rt.input_fn(batch, len(batch[0])), max_steps=1)
        start = rt.model_values(start_dir)
        single = rt.train_one_step_from(start_dir, os.path.join(self.get_temp_dir(), "single"), single_strategy(),
                                        batch, model)
        replicas = rt.train_one_step_from(start_dir, os.path.join(self.get_temp_dir(), "mirrored"),
                                          mirrored_strategy(), batch, model)

        self.assertEqual(sorted(replicas), sorted(single))
        for name, value in single.items():
            self.assertGreater(np.abs(value - start[name]).max(), 0.0, name)
            self.assertAllClose(replicas[name], value, rtol=1e-5, atol=1e-6, msg=name)

    def test_eval_matches_single_on_the_same_checkpoint(self):
        model_dir = self.get_temp_dir()
        replicas = rt.build_estimator(mirrored_strategy(), model_dir)
        replicas.train(rt.input_fn(rt.planted_rows(1024), PER_REPLICA_BATCH, repeat=True, drop_remainder=True),
                       max_steps=20)
        single = rt.build_estimator(strategies.get(strategies.make_config(name="single")), model_dir)
        evaluate = rt.input_fn(rt.planted_rows(EVAL_ROWS, seed=1), EVAL_BATCH)

        replica_metrics = replicas.evaluate(evaluate)
        single_metrics = single.evaluate(evaluate)
        for key in ("auc", "logloss", "loss"):
            self.assertAllClose(replica_metrics[key], single_metrics[key], rtol=1e-5, msg=key)


@pytest.mark.gpu
class MirroredGpuTest(tf.test.TestCase):

    def test_trains_on_every_gpu_with_nccl(self):
        gpus = devices_lib.visible_gpus()
        if not gpus:
            self.skipTest("no GPU is visible to TensorFlow")
        strategy = mirrored_strategy(num_devices=0, device_type="auto", cross_device_ops="nccl")
        self.assertEqual(strategy.topology.replicas_in_sync, gpus)
        estimator = rt.build_estimator(strategy, os.path.join(self.get_temp_dir(), "gpu"))
        estimator.train(rt.input_fn(rt.planted_rows(4096), PER_REPLICA_BATCH, repeat=True, drop_remainder=True),
                        max_steps=TRAIN_STEPS)
        metrics = estimator.evaluate(rt.input_fn(rt.planted_rows(EVAL_ROWS, seed=1), EVAL_BATCH))
        self.assertGreater(metrics["auc"], MIN_AUC)


if __name__ == "__main__":
    tf.test.main()
