"""End-to-end tests of the training job: train, evaluate, export, reload."""

import json
import os
import shutil
import tempfile

import numpy as np
import tensorflow as tf

import strategies
from dataprep import criteo, synthetic
from deepfm import config, job_config
from deepfm.runtime import checkpoints, trainer
from input_pipeline import files, pipeline, schema
from tests import command_line, paths

ROWS = 24_000
FEATURE_SIZE = 1_000
BATCH = 256
EPOCHS = 3
# Measured: 0.77-0.78 against a planted ceiling of about 0.81 at these settings.
MAX_GAP_TO_CEILING = 0.08
# Measured on the first 8,000 Kaggle rows (80/20 split): AUC 0.72 with Adam.
CRITEO_AUC_FLOOR = 0.68
CRITEO_DIR = paths.CRITEO_DIR
CRITEO_TSV = "criteo_kaggle_train_head8000.txt"


def small_model(feature_size, **overrides):
    values = dict(feature_size=feature_size, embedding_size=8, deep_layers=(32, 16), dropout=(0.0, 0.0),
                  learning_rate=0.005, optimizer="lazy_adam")
    values.update(overrides)
    return config.ModelConfig(**values)


def train_once(data_dir, model_dir, model, export=True, **train_overrides):
    values = dict(model_dir=model_dir, train_files=tuple(files.resolve([data_dir], "tfrecord")),
                  val_files=tuple(files.default_validation([data_dir], "tfrecord")),
                  export_dir=os.path.join(model_dir, "export") if export else None,
                  metrics_file=os.path.join(model_dir, "metrics.json"),
                  batch_size=BATCH, num_epochs=EPOCHS, seed=1)
    values.update(train_overrides)
    return trainer.run(job_config.JobConfig(
        train=config.TrainConfig(**values), model=model, input=pipeline.PipelineConfig(shuffle_buffer=10_000, seed=1),
        strategy=strategies.StrategyConfig(name="single")))


class EndToEndTest(tf.test.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.root = tempfile.mkdtemp(dir=tf.compat.v1.test.get_temp_dir())
        cls.data_dir = os.path.join(cls.root, "data")
        cls.metadata = synthetic.generate(ROWS, cls.data_dir, feature_size=FEATURE_SIZE, seed=3, shards=2)
        cls.model_dir = os.path.join(cls.root, "model")
        cls.model = small_model(cls.metadata.feature_size)
        cls.result = train_once(cls.data_dir, cls.model_dir, cls.model)

    def test_auc_is_near_the_planted_ceiling(self):
        self.assertGreater(self.result.auc, 0.6)
        self.assertGreater(self.result.auc, self.metadata.planted_auc - MAX_GAP_TO_CEILING)
        self.assertLessEqual(self.result.auc, self.metadata.planted_auc + 0.01)

    def test_metrics_file_holds_the_final_evaluation(self):
        with open(os.path.join(self.model_dir, "metrics.json")) as f:
            metrics = json.load(f)
        self.assertAlmostEqual(self.result.auc, metrics["auc"])
        self.assertAlmostEqual(self.result.logloss, metrics["logloss"])
        self.assertGreater(metrics["examples_per_sec"], 0)
        self.assertEqual(EPOCHS * (self.metadata.splits["train"].rows // BATCH), metrics["global_step"])

    def test_saved_model_predicts_as_the_estimator(self):
        rows = 64
        dataset = pipeline.DatasetBuilder(files.default_validation([self.data_dir], "tfrecord"),
                                          pipeline.PipelineConfig(), batch_size=rows)()
        features, _ = next(iter(dataset))
        loaded = tf.saved_model.load(self.result.export_path)
        serving = loaded.signatures["serving_default"]
        served = serving(feat_ids=features[schema.FEAT_IDS], feat_vals=features[schema.FEAT_VALS])["prob"].numpy()

        strategy = strategies.get(strategies.StrategyConfig(name="single"))
        strategy.setup()
        strategy.prepare(trainer.plan_for(config.TrainConfig(model_dir=self.model_dir, train_files=())))
        estimator = trainer.build_estimator(self.model, strategy)
        feats = {k: v.numpy() for k, v in features.items()}
        predicted = np.array([p["prob"] for p in estimator.predict(
            lambda: tf.data.Dataset.from_tensor_slices(feats).batch(rows))])
        self.assertEqual((rows,), served.shape)
        self.assertAllClose(predicted, served, rtol=1e-5, atol=1e-6)
        self.assertGreater(np.std(served), 0.01)

    def test_existing_model_dir_is_resumed_not_overwritten(self):
        model_dir = os.path.join(self.root, "resume")
        first = train_once(self.data_dir, model_dir, self.model, export=False, max_steps=30, val_files=())
        self.assertEqual(30, first.global_step)
        self.assertEqual(30, trainer.check_model_dir(model_dir))
        second = train_once(self.data_dir, model_dir, self.model, export=False, max_steps=50, val_files=())
        self.assertEqual(50, second.global_step)
        self.assertNotEmpty(tf.io.gfile.glob(os.path.join(model_dir, "model.ckpt-30.*")))


class ResumeTest(tf.test.TestCase):
    """A run resumed from a checkpoint goes on with the input and the budget where the checkpoint left them."""

    STEPS = 24  # checkpoints at 0, 8, 16 and 24: every one kept
    INTERVAL = 8

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.root = tempfile.mkdtemp(dir=tf.compat.v1.test.get_temp_dir())
        cls.data_dir = os.path.join(cls.root, "data")
        synthetic.generate(4_000, cls.data_dir, feature_size=FEATURE_SIZE, seed=5, shards=2)
        cls.model = small_model(FEATURE_SIZE, embedding_size=4)

    def train(self, model_dir, **overrides):
        values = dict(model_dir=model_dir, train_files=tuple(files.resolve([self.data_dir], "tfrecord")),
                      batch_size=64, max_steps=self.STEPS, seed=1, save_checkpoints_steps=self.INTERVAL)
        values.update(overrides)
        return trainer.run(job_config.JobConfig(
            train=config.TrainConfig(**values), model=self.model, input=pipeline.PipelineConfig(),
            strategy=strategies.StrategyConfig(name="single", intra_op_threads=1, inter_op_threads=1)))

    def copy_checkpoint(self, model_dir, step):
        """A model directory holding `model_dir`'s checkpoint at `step` and its records, as a job killed after it."""
        copy = tempfile.mkdtemp(dir=self.root)
        for path in tf.io.gfile.glob(os.path.join(model_dir, "model.ckpt-%d.*" % step)):
            shutil.copy(path, copy)
        for name in ("config.json", "input_position.json"):
            if os.path.exists(os.path.join(model_dir, name)):
                shutil.copy(os.path.join(model_dir, name), copy)
        checkpoints.write_state(copy, [os.path.join(copy, "model.ckpt-%d" % step)])
        return copy

    def test_a_resumed_run_trains_the_batches_of_an_uninterrupted_one(self):
        whole = os.path.join(self.root, "whole")
        self.assertEqual(self.STEPS, self.train(whole).global_step)
        resumed = self.copy_checkpoint(whole, self.INTERVAL)
        self.assertEqual(self.STEPS, self.train(resumed).global_step)
        # The same batches after the same state: the same weights (restarting the input at its first
        # batch trained other ones).
        names = [name for name, _ in tf.train.list_variables(whole) if not name.startswith("global_step")]
        self.assertNotEmpty(names)
        for name in names:
            self.assertAllClose(tf.train.load_variable(whole, name), tf.train.load_variable(resumed, name),
                                rtol=1e-5, atol=1e-7, msg=name)

    def test_a_run_resumed_at_its_budget_trains_no_step_and_exports(self):
        model_dir = os.path.join(self.root, "done")
        self.train(model_dir)
        resumed = self.copy_checkpoint(model_dir, self.STEPS)
        export_dir = os.path.join(resumed, "export")
        partial = os.path.join(export_dir, "temp-123")  # an export killed before it completed
        os.makedirs(partial)
        result = self.train(resumed, export_dir=export_dir, val_files=tuple(
            files.default_validation([self.data_dir], "tfrecord")))
        self.assertEqual(self.STEPS, result.global_step)
        self.assertIsNotNone(result.auc)
        self.assertTrue(os.path.isfile(os.path.join(result.export_path, "saved_model.pb")))
        self.assertFalse(os.path.exists(partial))

    def test_a_resize_keeps_the_examples_of_the_budget(self):
        # Twice the batch stands for twice the workers: the rest of the budget takes half the steps.
        model_dir = os.path.join(self.root, "resized")
        self.train(model_dir)
        resumed = self.copy_checkpoint(model_dir, self.INTERVAL)
        result = self.train(resumed, batch_size=128, max_steps=self.STEPS // 2)
        self.assertEqual(self.INTERVAL + (self.STEPS - self.INTERVAL) // 2, result.global_step)

    def test_saves_cut_short_are_removed_before_resuming(self):
        model_dir = os.path.join(self.root, "partial")
        self.train(model_dir, max_steps=self.INTERVAL)
        partial_save = os.path.join(model_dir, "model.ckpt-16_temp")
        os.makedirs(partial_save)
        with open(os.path.join(partial_save, "part-00000-of-00001.data-00000-of-00001"), "wb") as f:
            f.write(b"cut short")
        partial_state = os.path.join(model_dir, "checkpoint.tmp" + "0" * 32)
        with open(partial_state, "w") as f:
            f.write("model_checkpoint_path")
        # A chief killed while it wrote a checkpoint's meta graph (TensorFlow writes it through a temporary name).
        partial_meta = os.path.join(model_dir, "model.ckpt-24.meta.tmp" + "0123456789abcdef" * 2)
        with open(partial_meta, "wb") as f:
            f.write(b"cut short")
        self.assertEqual(self.INTERVAL, trainer.check_model_dir(model_dir))
        self.assertFalse(os.path.exists(partial_save))
        self.assertFalse(os.path.exists(partial_state))
        self.assertFalse(os.path.exists(partial_meta))
        self.assertNotEmpty(tf.io.gfile.glob(os.path.join(model_dir, "model.ckpt-%d.*" % self.INTERVAL)))


class BadInputTest(tf.test.TestCase):

    def test_model_dir_that_is_a_file(self):
        path = os.path.join(self.get_temp_dir(), "a_file")
        open(path, "w").close()
        with self.assertRaisesRegex(ValueError, "--model_dir .*a_file.* is not a directory"):
            trainer.check_model_dir(path)
        with self.assertRaisesRegex(ValueError, "--model_dir .*a_file/sub.* cannot be created"):
            trainer.check_model_dir(os.path.join(path, "sub"))

    def test_out_of_range_ids_name_the_id(self):
        data_dir = os.path.join(self.get_temp_dir(), "data")
        synthetic.generate(2_000, data_dir, feature_size=FEATURE_SIZE, seed=4, shards=1)
        too_small = small_model(FEATURE_SIZE // 2)
        # Found by the data check before training, naming the file and the record ...
        with self.assertRaisesRegex(ValueError, r"training file .*part-00000.tfrecord, record \d+: feature id \d+ "
                                    r"of field \d+ is out of range \[0, feature_size=%d\)" % (FEATURE_SIZE // 2)):
            train_once(data_dir, os.path.join(self.get_temp_dir(), "model"), too_small, export=False, max_steps=5)
        # ... and by the model's own check without it.
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError,
                                    r"feature id \d+ is out of range \[0, feature_size=%d\)" % (FEATURE_SIZE // 2)):
            train_once(data_dir, os.path.join(self.get_temp_dir(), "model2"), too_small, export=False, max_steps=5,
                       check_data=False)

    def test_a_model_fn_without_the_reported_metrics_is_named(self):
        import deepfm
        from deepfm.models import deepfm as deepfm_model

        def auc_only(features, labels, mode, params):
            spec = deepfm_model.model_fn(features, labels, mode, params)
            if mode != tf.estimator.ModeKeys.EVAL:
                return spec
            return spec._replace(eval_metric_ops={"auc": spec.eval_metric_ops["auc"]})

        data_dir = os.path.join(self.get_temp_dir(), "metrics_data")
        synthetic.generate(1_000, data_dir, feature_size=FEATURE_SIZE, seed=4, shards=1)
        data = deepfm.Dataset.open(data_dir)
        with self.assertRaisesRegex(ValueError, "the model_fn's EVAL metrics lack logloss .*prediction_metrics"):
            deepfm.train_and_evaluate(
                deepfm.TrainConfig(model_dir=os.path.join(self.get_temp_dir(), "auc_only"),
                                   train_files=data.train_files, val_files=data.val_files, max_steps=2),
                small_model(FEATURE_SIZE), model_fn=auc_only)

    def _run_cli(self, *args):
        return command_line.run(command_line.python_module("deepfm.train", *args), self.get_temp_dir(),
                                timeout=300)

    def test_cli_rejects_bad_flags_before_training(self):
        model_dir = os.path.join(self.get_temp_dir(), "never")
        data_dir = os.path.join(self.get_temp_dir(), "data")
        synthetic.generate(500, data_dir, feature_size=FEATURE_SIZE, seed=5, shards=1)
        cases = [
            (["--train_data", "/nonexistent/data"], "/nonexistent/data"),
            (["--train_data", data_dir, "--strategy", "magic"], "strategy.*single"),
            (["--train_data", data_dir, "--deep_layers", "64,x"], "--deep_layers must be a list of integers"),
        ]
        for args, message in cases:
            with self.subTest(args=args):
                proc = self._run_cli("--model_dir", model_dir, *args)
                self.assertNotEqual(0, proc.returncode)
                self.assertRegex(proc.stderr, message)
                self.assertFalse(os.path.exists(model_dir))


class JobAndStrategyTest(tf.test.TestCase):
    """`run` takes the job whole; a strategy handed with it must be the job's."""

    def test_a_strategy_of_another_configuration_is_refused_before_anything_is_written(self):
        model_dir = os.path.join(self.get_temp_dir(), "model")
        job = job_config.JobConfig(
            train=config.TrainConfig(model_dir=model_dir, train_files=("train.tfrecord",), batch_size=BATCH),
            model=small_model(FEATURE_SIZE), input=pipeline.PipelineConfig(),
            strategy=strategies.StrategyConfig(name="single"))
        other = strategies.get(strategies.StrategyConfig(name="single", intra_op_threads=1))
        with self.assertRaisesRegex(ValueError, r"intra_op_threads=1.*strategies.get\(job.strategy\)"):
            trainer.run(job, other)
        self.assertFalse(os.path.exists(model_dir))


class CriteoTest(tf.test.TestCase):

    def test_real_criteo_rows_train_above_floor(self):
        path = os.path.join(CRITEO_DIR, CRITEO_TSV)
        if not os.path.isfile(path):
            self.skipTest("real Criteo rows not found at %s (set CRITEO_DATA_DIR)" % path)
        data_dir = os.path.join(self.get_temp_dir(), "criteo")
        metadata = criteo.convert([path], data_dir, criteo.ConversionOptions(val_fraction=0.2, shards=2, min_count=5))
        result = train_once(data_dir, os.path.join(self.get_temp_dir(), "model"),
                            small_model(metadata.feature_size, learning_rate=0.001, optimizer="adam"),
                            export=False, batch_size=128)
        self.assertGreater(result.auc, CRITEO_AUC_FLOOR)


class PipeModeTest(tf.test.TestCase):

    def test_trains_and_evaluates_from_pipe_channels(self):
        from input_pipeline import pipe_feeder

        root = self.create_tempdir().full_path
        data_dir = os.path.join(root, "data")
        synthetic.generate(4_000, data_dir, feature_size=FEATURE_SIZE, seed=6, shards=2)
        base_dir = os.path.join(root, "opt_ml")
        epochs = 2
        feeder = pipe_feeder.PipeFeeder(base_dir, {
            "train_0": files.resolve([data_dir], "tfrecord"),
            "validation": files.default_validation([data_dir], "tfrecord")}, epochs=epochs)
        feeder.start()
        self.addCleanup(feeder.stop)
        steps = epochs * (3_600 // BATCH)
        train = config.TrainConfig(model_dir=os.path.join(root, "model"), train_files=(), batch_size=BATCH,
                                   max_steps=steps, val_channel="validation")
        input_config = pipeline.PipelineConfig(input_mode=pipeline.INPUT_MODE_PIPE, pipe_base_dir=base_dir,
                                               pipe_timeout_s=60)
        result = trainer.run(job_config.JobConfig(
            train=train, model=small_model(FEATURE_SIZE), input=input_config,
            strategy=strategies.StrategyConfig(name="single", train_channels=("train_0",))))
        self.assertEqual(steps, result.global_step)
        self.assertGreater(result.auc, 0.55)
        self.assertEqual(2, feeder.epochs_written["train_0"])

    def test_pipe_mode_without_a_step_budget_trains_num_epochs_each_ending_with_its_fifo(self):
        from input_pipeline import pipe_feeder

        root = self.create_tempdir().full_path
        synthetic.generate(4_000, os.path.join(root, "data"), feature_size=FEATURE_SIZE, seed=5, shards=1)
        base_dir = os.path.join(root, "ml")
        epochs = 2
        feeder = pipe_feeder.PipeFeeder(base_dir, {"train_0": tf.io.gfile.glob(
            os.path.join(root, "data", "train", "*.tfrecord"))}, epochs=epochs).start()
        self.addCleanup(feeder.stop)
        train = config.TrainConfig(model_dir=os.path.join(root, "model"), train_files=(), batch_size=BATCH,
                                   num_epochs=epochs)
        input_config = pipeline.PipelineConfig(input_mode=pipeline.INPUT_MODE_PIPE, pipe_base_dir=base_dir,
                                               pipe_timeout_s=60)
        result = trainer.run(job_config.JobConfig(
            train=train, model=small_model(FEATURE_SIZE), input=input_config,
            strategy=strategies.StrategyConfig(name="single", train_channels=("train_0",))))
        self.assertEqual(epochs * (3_600 // BATCH), result.global_step)
        self.assertEqual(epochs, feeder.epochs_written["train_0"])

    def test_files_without_metadata_are_counted_for_the_step_budget(self):
        root = self.create_tempdir().full_path
        synthetic.generate(2_000, os.path.join(root, "data"), feature_size=FEATURE_SIZE, seed=6, shards=1)
        lone = os.path.join(root, "lone")
        os.makedirs(lone)
        for path in tf.io.gfile.glob(os.path.join(root, "data", "train", "*.tfrecord")):
            shutil.copy(path, lone)
        train = config.TrainConfig(model_dir=os.path.join(root, "model"),
                                   train_files=tuple(tf.io.gfile.glob(os.path.join(lone, "*"))), batch_size=BATCH)
        result = trainer.run(job_config.JobConfig(train=train, model=small_model(FEATURE_SIZE),
                                                  input=pipeline.PipelineConfig(),
                                                  strategy=strategies.StrategyConfig(name="single")))
        self.assertEqual(1_800 // BATCH, result.global_step)


if __name__ == "__main__":
    tf.test.main()
