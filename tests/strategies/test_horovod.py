"""Tests of the `horovod` strategy adapter.

The unit tests run Horovod in this process (one rank). The slow tests start
two real ranks on localhost with Horovod's launcher (Gloo) in their own
process group, stopped with every process they started on cleanup: the
installed `horovodrun` starting `deepfm.train` as a user may, or, for the
rank program of tests/, the launcher `deepfm.launch` starts
(`jobs.local.horovod_runner`: horovodrun less its forked build check).
"""

import glob
import json
import math
import os
import shutil
import sys
import tempfile
from unittest import mock

import pytest
import tensorflow as tf
from absl.testing import parameterized

import strategies
from dataprep import synthetic
from input_pipeline import formats, schema
from jobs.local import processes
from strategies import horovod, horovod_controllers
from tests import command_line, paths, step_budget
from tests.strategies.sharded import ranks_testing

REPO_ROOT = paths.REPO_ROOT
HOROVODRUN = os.path.join(os.path.dirname(sys.executable), "horovodrun")
NUM_RANKS = 2
RUN_TIMEOUT_SECS = 240
# Horovod warns about a stall after HOROVOD_STALL_CHECK_TIME_SECONDS and,
# with this setting, aborts the job instead of hanging until the timeout.
STALL_SHUTDOWN_SECS = 120
STALL_WARNING = "subset of ranks"
ERROR_LINE = "Error"
ERROR_LINES_SHOWN = 10

FEATURE_SIZE = 2000
VALIDATION_ROWS = 1000
DATA_SEED = 11
BATCH_SIZE = 128
NUM_EPOCHS = 4
MIN_AUC = 0.65
MODEL_FLAGS = ("--batch_size=%d" % BATCH_SIZE, "--num_epochs=%d" % NUM_EPOCHS, "--embedding_size=8",
               "--deep_layers=16,8", "--dropout=0,0", "--learning_rate=0.001", "--seed=7",
               "--log_every_n_steps=20", "--save_checkpoints_steps=50")


def _tempdir(test: tf.test.TestCase) -> str:
    """A fresh directory under the test's temp dir, removed after the test."""
    path = tempfile.mkdtemp(dir=test.get_temp_dir())
    test.addCleanup(shutil.rmtree, path, ignore_errors=True)
    return path


def _config(**overrides) -> strategies.StrategyConfig:
    return strategies.make_config(name="horovod", **overrides)


def _skip_without_horovod(test: tf.test.TestCase) -> None:
    try:
        horovod_controllers.import_horovod()
    except ImportError as e:
        test.skipTest("Horovod is not installed: %s" % e)


class LearningRateFactorTest(tf.test.TestCase, parameterized.TestCase):

    @parameterized.named_parameters(
        ("none", "none", (1.0, 1.0, 1.0, 1.0)),
        ("linear", "linear", (1.0, 2.0, 4.0, 8.0)),
        ("sqrt", "sqrt", (1.0, math.sqrt(2.0), 2.0, math.sqrt(8.0))),
        ("capped_at_the_best_practice_1_5", "capped", (1.0, 1.5, 1.5, 1.5)),
    )
    def test_factor_for_1_2_4_8_ranks(self, policy, expected):
        factors = [horovod.learning_rate_factor(policy, size) for size in (1, 2, 4, 8)]
        self.assertAllClose(expected, factors)

    def test_capped_takes_the_configured_cap(self):
        self.assertAllClose([1.0, 2.0, 3.0, 3.0],
                            [horovod.learning_rate_factor("capped", size, cap=3.0) for size in (1, 2, 4, 8)])

    def test_best_practice_rate_with_four_workers(self):
        self.assertAllClose(0.0015, 0.001 * horovod.learning_rate_factor("capped", 4))

    def test_unknown_policy_is_named(self):
        with self.assertRaisesRegex(ValueError, "--lr_scaling must be one of none, linear, sqrt, capped, got 'cube'"):
            horovod.learning_rate_factor("cube", 2)


class PinnedGpuTest(tf.test.TestCase, parameterized.TestCase):

    @parameterized.named_parameters(
        ("auto_without_gpus_trains_on_cpu", "auto", 0, 1, 2, None),
        ("auto_pins_the_local_rank", "auto", 4, 3, 4, 3),
        ("gpu_pins_the_local_rank", "gpu", 2, 1, 2, 1),
        ("cpu_ignores_gpus", "cpu", 4, 1, 2, None),
    )
    def test_pinned_gpu(self, device_type, num_gpus, local_rank, local_size, expected):
        self.assertEqual(expected, horovod.pinned_gpu(device_type, num_gpus, local_rank, local_size))

    def test_fewer_gpus_than_local_ranks_is_refused(self):
        with self.assertRaisesRegex(ValueError, "4 horovod ranks on this host but only 2 visible GPU"):
            horovod.pinned_gpu("auto", 2, 0, 4)

    def test_gpu_without_gpus_is_refused(self):
        with self.assertRaisesRegex(ValueError, "--device_type gpu: no GPU"):
            horovod.pinned_gpu("gpu", 0, 0, 1)


class ValidateTest(tf.test.TestCase, parameterized.TestCase):

    @parameterized.named_parameters(
        ("cap_below_one", {"lr_scale_cap": 0.5}, "--lr_scale_cap must be >= 1, got 0.5"),
        ("several_devices", {"num_devices": 4}, "--num_devices applies to --strategy mirrored or tower, not horovod"),
        ("unknown_policy", {"lr_scaling": "cube"}, "--lr_scaling must be one of .* got 'cube'"),
        ("negative_groups", {"hvd_groups": -1, "sparse_as_dense": True}, "--hvd_groups must be >= 0, got -1"),
        # Horovod 0.28.1's grouped allreduce fails on a group of sparse and dense gradients.
        ("groups_of_sparse_gradients", {"hvd_groups": 2},
         "--hvd_groups 2 with --strategy horovod needs --sparse_as_dense"),
    )
    def test_bad_option_is_named(self, overrides, message):
        with self.assertRaisesRegex(ValueError, message):
            _config(**overrides)

    def test_missing_horovod_says_how_to_install_it(self):
        with mock.patch.dict(sys.modules, {"horovod": None, "horovod.tensorflow": None}):
            with self.assertRaisesRegex(ImportError, "--strategy horovod needs Horovod.*pip install"):
                strategies.get(_config()).setup()


class OneRankTest(tf.test.TestCase, parameterized.TestCase):
    """The adapter in this process: Horovod with a single rank."""

    def setUp(self):
        super().setUp()
        _skip_without_horovod(self)

    def test_rank_zero_is_chief_and_everyone_evaluates(self):
        strategy = strategies.get(_config(lr_scaling="linear"))
        topology = strategy.setup()
        self.assertEqual((1, 0, 0, 1), (topology.workers, topology.rank, topology.local_rank, topology.hosts))
        self.assertEqual("rank0", topology.task)
        self.assertTrue(topology.is_chief)
        self.assertTrue(topology.evaluates)
        self.assertTrue(topology.lockstep)
        context = strategy.input_plan().context
        self.assertEqual((1, 0, 1), (context.num_input_pipelines, context.input_pipeline_id,
                                      context.num_replicas_in_sync))
        self.assertEqual(1.0, strategy.model_context(tf.estimator.ModeKeys.TRAIN).learning_rate_factor)
        self.assertIn("rank 0 of 1", strategy.describe())

    def test_chief_keeps_model_dir_and_checkpoint_settings(self):
        model_dir = _tempdir(self)
        strategy = strategies.get(_config())
        strategy.setup()
        strategy.prepare(strategies.Plan(model_dir=model_dir, steps_per_worker=10, save_checkpoints_steps=7, seed=3))
        config = strategy.run.run_config
        self.assertEqual(model_dir, config.model_dir)
        self.assertEqual(model_dir, strategy.run.checkpoint_dir)
        self.assertEqual(7, config.save_checkpoints_steps)
        self.assertEqual(3, config.tf_random_seed)

    def test_cpu_device_type_hides_gpus(self):
        strategy = strategies.get(_config(device_type="cpu"))
        strategy.setup()
        strategy.prepare(strategies.Plan(model_dir=_tempdir(self)))
        config = strategy.run.run_config.session_config
        self.assertEqual(0, config.device_count["GPU"])
        self.assertEqual("", config.gpu_options.visible_device_list)

    def test_hooks_broadcast_from_rank_zero(self):
        strategy = strategies.get(_config())
        strategy.setup()
        strategy.prepare(strategies.Plan(model_dir=_tempdir(self)))
        hooks = strategy.run.train_hooks
        self.assertLen(hooks, 1)
        self.assertEqual(0, hooks[0].root_rank)

    def _embedding_gradient(self, sparse_as_dense):
        strategy = strategies.get(_config(sparse_as_dense=sparse_as_dense))
        strategy.setup()
        (wrap,) = strategy.model_context(tf.estimator.ModeKeys.TRAIN).optimizer_wrappers
        with tf.Graph().as_default():
            table = tf.compat.v1.get_variable("table", [10, 4])
            loss = tf.reduce_sum(tf.nn.embedding_lookup(table, tf.constant([1, 3])))
            optimizer = wrap(tf.compat.v1.train.GradientDescentOptimizer(0.1))
            ((gradient, _),) = optimizer.compute_gradients(loss, var_list=[table])
            with tf.compat.v1.Session() as session:
                session.run(tf.compat.v1.global_variables_initializer())
                return gradient, session.run(gradient)

    def _horovod_ops(self, **options):
        """The Horovod op types of a wrapped optimizer's gradients of two dense variables."""
        strategy = strategies.get(_config(**options))
        strategy.setup()
        (wrap,) = strategy.model_context(tf.estimator.ModeKeys.TRAIN).optimizer_wrappers
        with tf.Graph().as_default() as graph:
            weights = [tf.compat.v1.get_variable(name, [3]) for name in ("a", "b")]
            wrap(tf.compat.v1.train.GradientDescentOptimizer(0.1)).compute_gradients(
                tf.add_n([tf.reduce_sum(w) for w in weights]))
            graph_def = graph.as_graph_def()
        # The collectives sit in the branch of a cond taken with more than one rank: a library function.
        types = [node.op for node in graph_def.node]
        types += [node.op for function in graph_def.library.function for node in function.node_def]
        return sorted({op for op in types if op.startswith("Horovod")})

    def test_groups_submit_the_gradients_as_one_grouped_collective(self):
        self.assertEqual(["HorovodAllreduce"], self._horovod_ops(sparse_as_dense=True))
        self.assertEqual(["HorovodGroupedAllreduce"], self._horovod_ops(sparse_as_dense=True, hvd_groups=1))

    def test_embedding_gradients_stay_sparse_by_default(self):
        gradient, value = self._embedding_gradient(sparse_as_dense=False)
        self.assertIsInstance(gradient, tf.IndexedSlices)
        self.assertAllEqual([1, 3], value.indices)

    def test_sparse_as_dense_allreduces_a_dense_gradient(self):
        gradient, value = self._embedding_gradient(sparse_as_dense=True)
        self.assertIsInstance(gradient, tf.Tensor)
        self.assertAllEqual([0, 4, 0, 4, 0, 0, 0, 0, 0, 0], value.sum(axis=1))

    def test_checkpoint_at_the_step_budget_prepares_a_run_of_no_step(self):
        # The trainer then runs a session of no step on every rank (tests/jobs/local/test_launcher.py).
        model_dir = _tempdir(self)
        strategy = strategies.get(_config())
        strategy.setup()
        strategy.prepare(strategies.Plan(model_dir=model_dir, steps_per_worker=50, resume_step=50, max_steps=50))
        self.assertEqual((50, 50), (strategy.run.start_step, strategy.run.max_steps))
        self.assertEqual(model_dir, strategy.run.run_config.model_dir)

    def test_checkpoint_below_the_step_budget_resumes_from_the_agreed_step(self):
        model_dir = _tempdir(self)
        strategy = strategies.get(_config())
        strategy.setup()
        strategy.prepare(strategies.Plan(model_dir=model_dir, steps_per_worker=80, resume_step=50))
        self.assertEqual((50, 80), (strategy.run.start_step, strategy.run.max_steps))
        self.assertEqual(model_dir, strategy.run.run_config.model_dir)

    def test_agree_max_is_a_horovod_allreduce_named_as_asked(self):
        strategy = strategies.get(_config())
        strategy.setup()
        self.assertEqual(7, strategy.agree_max(7))
        with tf.Graph().as_default() as graph:
            strategy.agree_max(tf.constant(1), name="some_agreement")
            self.assertIn("HorovodAllreduce", [op.type for op in graph.get_operations()])
            self.assertTrue(any("some_agreement" in op.name for op in graph.get_operations()))

    def test_pipe_channel_without_a_channel_per_local_rank_is_refused(self):
        strategy = strategies.get(_config(train_channels=()))
        strategy.setup()
        with self.assertRaisesRegex(ValueError, "--train_channels '': 1 workers per host need 1 channels, got 0"):
            strategy.input_plan().pipe_channel()

    def test_pipe_mode_reads_the_channel_of_its_local_rank(self):
        strategy = strategies.get(_config(train_channels=("train_0", "train_1")))
        strategy.setup()
        self.assertEqual("train_0", strategy.input_plan().pipe_channel())

    @parameterized.parameters(((), "file_mode_shard"), (("train_0",), "pipe_mode_shard"))
    def test_channels_choose_the_sharding_rule(self, channels, rule):
        strategy = strategies.get(_config(train_channels=channels))
        strategy.setup()
        with mock.patch.object(horovod.sharding, rule, return_value=(3, 2)) as chosen:
            context = strategy.input_plan().context
        chosen.assert_called_once()
        self.assertEqual((3, 2), (context.num_input_pipelines, context.input_pipeline_id))


def _event_scalars(directory, tag):
    """(step, value) of every `tag` summary in the event files directly in `directory`."""
    values = []
    for path in glob.glob(os.path.join(directory, "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag == tag:
                    values.append((event.step, value.simple_value))
    return sorted(values)


@pytest.mark.slow
class TwoRanksTest(tf.test.TestCase):
    """Two real ranks under horovodrun, on tiny synthetic data."""

    def setUp(self):
        super().setUp()
        _skip_without_horovod(self)
        if not os.access(HOROVODRUN, os.X_OK):
            self.skipTest("no horovodrun beside %s" % sys.executable)
        self.work_dir = _tempdir(self)
        self.rank_tmp = os.path.join(self.work_dir, "tmp")
        self.log_dir = os.path.join(self.work_dir, "logs")
        os.makedirs(self.rank_tmp)

    def _dataset(self, train_rows_per_file):
        """A synthetic dataset root whose train files hold the given rows.

        `synthetic.generate` writes equal parts; consecutive parts are
        concatenated (TFRecord and LibSVM files both concatenate record by
        record) into files of the wanted sizes, and the metadata updated.
        """
        root = os.path.join(self.work_dir, "data")
        train_rows = sum(train_rows_per_file)
        part_rows = math.gcd(*train_rows_per_file)
        metadata = synthetic.generate(
            train_rows + VALIDATION_ROWS, root, feature_size=FEATURE_SIZE,
            val_fraction=VALIDATION_ROWS / (train_rows + VALIDATION_ROWS), shards=train_rows // part_rows,
            seed=DATA_SEED)
        train_dir = os.path.join(root, schema.TRAIN_SPLIT)
        stems, first_part = {}, 0
        for index, rows in enumerate(train_rows_per_file):
            parts = range(first_part, first_part + rows // part_rows)
            for data_format in map(formats.get, formats.names()):
                with open(os.path.join(train_dir, "file-%d%s" % (index, data_format.extension)), "wb") as merged:
                    for part in parts:
                        path = os.path.join(train_dir, formats.as_format(data_format).shard_name(part))
                        with open(path, "rb") as f:
                            shutil.copyfileobj(f, merged)
                        os.remove(path)
            stems["%s/file-%d" % (schema.TRAIN_SPLIT, index)] = rows
            first_part = parts.stop
        metadata.splits[schema.TRAIN_SPLIT] = schema.SplitInfo(rows=train_rows, shards=stems)
        metadata.write(root)
        return root, metadata

    def _run(self, argv, name, log_name=None, tests_importable=False):
        """Runs `argv` to completion in its own process group; returns its output.

        Args:
          argv: the command line.
          name: the task's name; its output goes to `<logs>/<name>.log`.
          log_name: a file under the logs directory holding the ranks'
            output, when it is not the task's own.
          tests_importable: the ranks run a program of tests/, which the
            virtual environment does not install: the repository goes on
            PYTHONPATH.
        """
        # A user's environment (`tests.command_line`) and what the test sets on purpose: a private
        # TMPDIR (no rank may leave files there), Horovod's stall shutdown, and for the rank programs
        # of tests/ (which the virtual environment does not install) the repository on PYTHONPATH.
        env = command_line.environment(dict(
            TMPDIR=self.rank_tmp, HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=str(STALL_SHUTDOWN_SECS),
            **({"PYTHONPATH": REPO_ROOT} if tests_importable else {})))
        group = processes.ProcessGroup(self.log_dir)
        self.addCleanup(group.stop)
        task = group.start(name, argv, env=env)
        log_path = os.path.join(self.log_dir, log_name) if log_name else task.log_path
        try:
            group.wait(timeout=RUN_TIMEOUT_SECS)
        except (processes.TaskFailedError, TimeoutError) as e:
            with open(log_path) as f:
                errors = [line for line in f if ERROR_LINE in line]
            self.fail("%s\nerror lines of %s:\n%s" % (e, log_path, "".join(errors[-ERROR_LINES_SHOWN:])))
        with open(log_path) as f:
            output = f.read()
        self.assertNotIn(STALL_WARNING, output)
        self.assertEqual([], command_line.left_in(self.rank_tmp), "a rank left its private model_dir behind")
        return output

    def _horovodrun(self, program, flags, name):
        """`program` with `flags` on `NUM_RANKS` ranks under the launcher `deepfm.launch` starts.

        That is horovodrun less its build check, which imports `horovod.tensorflow` (and so TensorFlow) in a
        forked process, about 3 s of CPU per run; `test_two_ranks_train_and_only_rank_zero_writes` runs the
        installed horovodrun, check and all.
        """
        return self._run(ranks_testing.HOROVODRUN_COMMAND + ["--gloo", "-np", str(NUM_RANKS),
                                                             "-H", "localhost:%d" % NUM_RANKS, "python"]
                         + list(program) + list(flags), name, tests_importable=True)

    def _installed_horovodrun(self, train_flags):
        """`python -m deepfm.train` with `train_flags` on `NUM_RANKS` ranks under the installed `horovodrun`.

        As a user may start them without `deepfm.launch` (docs/levers.md), the build check included.
        """
        return self._run([HOROVODRUN, "--gloo", "-np", str(NUM_RANKS), "-H", "localhost:%d" % NUM_RANKS,
                          "python", "-m", "deepfm.train", "--strategy=horovod"] + list(train_flags), "horovodrun")

    def _expected_steps(self, data_root):
        """The step budget: the smallest shard's full batches, times the epochs."""
        return step_budget.steps_per_worker(data_root, BATCH_SIZE, NUM_RANKS, NUM_EPOCHS)

    def test_two_ranks_train_and_only_rank_zero_writes(self):
        data_root, _ = self._dataset([4000, 4000])
        model_dir = os.path.join(self.work_dir, "model")
        export_dir = os.path.join(self.work_dir, "export")
        metrics_file = os.path.join(self.work_dir, "metrics.json")
        output = self._installed_horovodrun(
            ["--train_data=" + data_root, "--model_dir=" + model_dir,
             "--export_dir=" + export_dir, "--metrics_file=" + metrics_file, "--lr_scaling=sqrt"]
            + list(MODEL_FLAGS))

        with open(metrics_file) as f:
            metrics = json.load(f)
        expected_steps = self._expected_steps(data_root)
        self.assertEqual(expected_steps, metrics["global_step"])
        self.assertGreater(metrics["auc"], MIN_AUC)
        losses = _event_scalars(model_dir, "loss")
        self.assertGreaterEqual(len(losses), 2, losses)
        self.assertLess(losses[-1][1], losses[0][1])
        self.assertLess(metrics["logloss"], losses[0][1])
        # One process wrote the checkpoints, summaries, evaluation and export.
        self.assertTrue(tf.io.gfile.exists(os.path.join(model_dir, "model.ckpt-%d.index" % expected_steps)))
        self.assertLen(glob.glob(os.path.join(model_dir, "events.out.tfevents.*")), 1)
        self.assertLen(glob.glob(os.path.join(model_dir, "eval_validation", "events.out.tfevents.*")), 1)
        exports = glob.glob(os.path.join(export_dir, "*", "saved_model.pb"))
        self.assertLen(exports, 1)
        self.assertEqual(exports[0], os.path.join(metrics["export_path"], "saved_model.pb"))
        self.assertEqual(1, output.count("validation AUC:"), "only rank 0 prints the summary")

    def _rank_results(self, flags, result_dir, name):
        """Runs the test rank program on `NUM_RANKS` ranks; returns each rank's record."""
        self._horovodrun(["-m", "tests.strategies.horovod_rank"], ["--result_dir=" + result_dir] + list(flags), name)
        results = []
        for rank in range(NUM_RANKS):
            with open(os.path.join(result_dir, "rank-%d.json" % rank)) as f:
                results.append(json.load(f))
        self.assertEqual(list(range(NUM_RANKS)), [r["rank"] for r in results])
        return results

    def test_uneven_shards_and_a_resume_end_with_identical_ranks(self):
        data_root, metadata = self._dataset([3000, 1000])
        self.assertEqual({"train/file-0": 3000, "train/file-1": 1000},
                         metadata.splits[schema.TRAIN_SPLIT].shards)
        model_dir = os.path.join(self.work_dir, "model")
        flags = ["--strategy=horovod", "--train_data=" + data_root, "--model_dir=" + model_dir,
                 "--sparse_as_dense", "--lr_scaling=capped"] + list(MODEL_FLAGS)
        expected_steps = self._expected_steps(data_root)
        # A first job stops halfway; the second resumes on rank 0 only (the
        # other rank starts from a fresh private model_dir) and must still
        # run the same steps on both ranks.
        first = self._rank_results(flags + ["--max_steps=%d" % (expected_steps // 2), "--val_data="],
                                   os.path.join(self.work_dir, "first"), "first")
        self.assertEqual([expected_steps // 2] * NUM_RANKS, [r["global_step"] for r in first])
        results = self._rank_results(flags, os.path.join(self.work_dir, "resumed"), "resumed")

        chief, other = results
        self.assertEqual([True, False], [r["is_chief"] for r in results])
        self.assertEqual(model_dir, chief["checkpoint_dir"])
        self.assertStartsWith(other["checkpoint_dir"], self.rank_tmp)
        self.assertFalse(os.path.exists(other["checkpoint_dir"]), "rank 1's private model_dir was not removed")
        self.assertEqual([expected_steps] * NUM_RANKS, [r["global_step"] for r in results])
        self.assertEqual(chief["variables_digest"], other["variables_digest"])
        self.assertNotEqual(first[0]["variables_digest"], chief["variables_digest"])
        # Both ranks report the metrics of all the validation rows (their shards' metric state summed).
        self.assertEqual(chief["auc"], other["auc"])
        self.assertGreater(chief["auc"], MIN_AUC)
        self.assertIsNone(other["export_path"])

if __name__ == "__main__":
    tf.test.main()
