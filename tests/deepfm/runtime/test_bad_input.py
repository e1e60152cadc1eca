"""Bad input of every kind: one error that names the file, line, flag or value, and the model directory intact.

Each test resumes a model directory trained a few steps (a copy of one made
once) with one bad input, and checks the error and that every file of the
model directory is byte for byte what it was (docs/reliability.md lists
them). A Pipe-mode FIFO that breaks mid-stream is found only while training
runs: there the model directory keeps every checkpoint it had, unchanged,
and gains none.
"""

import hashlib
import os
import shutil
import tempfile
import time

import numpy as np
import tensorflow as tf

import strategies
from dataprep import synthetic
from deepfm import config, job_config
from deepfm.runtime import trainer
from input_pipeline import files, formats, pipeline, schema
from tests import command_line
from tests.input_pipeline import dataset_io, example_files

FEATURE_SIZE = 1_000
ROWS = 3_000
SHARDS = 3
BATCH = 64
FIRST_STEPS = 8
MIDDLE = 1  # the shard in the middle of the training file list
# Pipe mode's FIFO timeout at its default (`--pipe_timeout_s`).
PIPE_TIMEOUT_S = 120


def digests(directory):
    """Relative path -> SHA-256 of every file under `directory`."""
    found = {}
    for parent, _, names in os.walk(directory):
        for name in names:
            path = os.path.join(parent, name)
            with open(path, "rb") as f:
                found[os.path.relpath(path, directory)] = hashlib.sha256(f.read()).hexdigest()
    return found


def small_model(**overrides):
    values = dict(feature_size=FEATURE_SIZE, embedding_size=4, deep_layers=(8,), dropout=(0.0,))
    values.update(overrides)
    return config.ModelConfig(**values)


def single():
    return strategies.get(strategies.StrategyConfig(name="single"))


class BadInputTest(tf.test.TestCase):
    """One model directory trained `FIRST_STEPS` steps, resumed with each bad input in turn."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.root = tempfile.mkdtemp(dir=tf.compat.v1.test.get_temp_dir())
        cls.data = os.path.join(cls.root, "data")
        synthetic.generate(ROWS, cls.data, feature_size=FEATURE_SIZE, seed=4, shards=SHARDS)
        cls.trained = os.path.join(cls.root, "trained")
        cls.run_job(cls.data, cls.trained, max_steps=FIRST_STEPS)

    @classmethod
    def run_job(cls, data, model_dir, data_format=formats.TFRECORD, model=None, strategy=None, **overrides):
        # Without the memory check (tests/deepfm/runtime/test_preflight.py): it comes before every other check,
        # writes nothing, and builds the model's graph once more (about 0.5 s of CPU a run).
        values = dict(model_dir=model_dir, train_files=tuple(files.resolve([data], data_format)),
                      val_files=tuple(files.default_validation([data], data_format)), batch_size=BATCH,
                      max_steps=2 * FIRST_STEPS, save_checkpoints_steps=FIRST_STEPS, check_memory=False)
        values.update(overrides)
        strategy = strategy or single()
        return trainer.run(job_config.JobConfig(
            train=config.TrainConfig(**values), model=model or small_model(),
            input=pipeline.PipelineConfig(data_format=data_format), strategy=strategy.config), strategy)

    def setUp(self):
        super().setUp()
        self.model_dir = os.path.join(self.create_tempdir().full_path, "model")
        shutil.copytree(self.trained, self.model_dir)
        self.before = digests(self.model_dir)

    def bad_data(self, data_format, damage):
        """A copy of the dataset whose middle training shard of `data_format` `damage(path)` changed."""
        data = os.path.join(self.create_tempdir().full_path, "data")
        shutil.copytree(self.data, data)
        path = os.path.join(data, schema.TRAIN_SPLIT, data_format.shard_name(MIDDLE))
        damage(path)
        return data, path

    def assertRefused(self, message, data=None, data_format=formats.TFRECORD, one_line=True, **run):
        """The run fails with `message` (a regex; in one line), and the model directory is unchanged."""
        with self.assertRaisesRegex(ValueError, message) as raised:
            self.run_job(data or self.data, self.model_dir, data_format, **run)
        if one_line:
            self.assertNotIn("\n", str(raised.exception).strip())
        self.assertEqual(self.before, digests(self.model_dir), "the model directory changed")

    def rewrite_tfrecord(self, path, change):
        """Rewrites a TFRecord file's rows (labels, ids, values) through `change`."""
        rows = [np.array(part) for part in dataset_io.read_tfrecord(path, schema.FIELD_SIZE)]
        change(*rows)
        example_files.write_tfrecord(path, rows)

    def test_a_truncated_tfrecord_file_in_the_middle(self):
        data, path = self.bad_data(formats.TFRECORD, lambda p: os.truncate(p, os.path.getsize(p) - 100))
        self.assertRefused(r"^training data: TFRecord file %s could not be read to its end" % path, data)

    def test_a_corrupted_tfrecord_file_in_the_middle(self):
        def flip(path):
            with open(path, "r+b") as f:
                f.seek(os.path.getsize(path) // 2)
                byte = f.read(1)
                f.seek(-1, os.SEEK_CUR)
                f.write(bytes([byte[0] ^ 0x55]))
        data, path = self.bad_data(formats.TFRECORD, flip)
        self.assertRefused(r"^training data: TFRecord file %s could not be read to its end" % path, data)

    def test_a_truncated_packed_tfrecord_file_in_the_middle(self):
        data, path = self.bad_data(formats.TFRECORD_PACKED, lambda p: os.truncate(p, os.path.getsize(p) - 100))
        self.assertRefused(r"^training data: TFRecord file %s could not be read to its end" % path, data,
                           formats.TFRECORD_PACKED)

    def test_a_corrupted_libsvm_file_in_the_middle(self):
        def corrupt(path):
            with open(path) as f:
                lines = f.read().splitlines()
            lines[41] = lines[41].replace(":", "=", 1)
            with open(path, "w") as f:
                f.write("\n".join(lines) + "\n")
        data, path = self.bad_data(formats.LIBSVM, corrupt)
        self.assertRefused(r"^training data: %s:42: bad LibSVM line" % path, data, formats.LIBSVM)

    def test_a_row_with_another_number_of_fields(self):
        def short_row(path):
            with open(path) as f:
                lines = f.read().splitlines()
            lines[9] = lines[9].rsplit(" ", 1)[0]
            with open(path, "w") as f:
                f.write("\n".join(lines) + "\n")
        data, path = self.bad_data(formats.LIBSVM, short_row)
        self.assertRefused(r"^training data: %s:10: .*38 id:value pair" % path, data, formats.LIBSVM)

    def test_nan_and_infinite_values(self):
        def nan_value(labels, ids, values):
            values[17, 5] = np.nan
        data, path = self.bad_data(formats.TFRECORD, lambda p: self.rewrite_tfrecord(p, nan_value))
        self.assertRefused(r"^training file %s, record 17: value nan of field 5" % path, data)

        def infinite_label(labels, ids, values):
            labels[3] = np.inf
        data, path = self.bad_data(formats.TFRECORD, lambda p: self.rewrite_tfrecord(p, infinite_label))
        self.assertRefused(r"^training file %s, record 3: label inf" % path, data)

    def test_negative_ids_and_ids_at_feature_size(self):
        for bad in (-7, FEATURE_SIZE):
            def bad_id(labels, ids, values, bad=bad):
                ids[25, 2] = bad
            data, path = self.bad_data(formats.TFRECORD, lambda p: self.rewrite_tfrecord(p, bad_id))
            self.assertRefused(r"^training file %s, record 25: feature id %d of field 2 is out of range "
                               r"\[0, feature_size=%d\): check --feature_size" % (path, bad, FEATURE_SIZE), data)

    def test_an_empty_shard(self):
        data, path = self.bad_data(formats.TFRECORD, lambda p: open(p, "w").close())
        with self.assertRaisesRegex(ValueError, r"input file %s \(from spec item .*\) is empty \(0 bytes\)" % path):
            files.resolve([data], formats.TFRECORD)
        self.assertEqual(self.before, digests(self.model_dir))

    def test_metadata_that_disagrees_with_its_files(self):
        def fewer_rows(path):
            rows = [np.array(part) for part in dataset_io.read_tfrecord(path, schema.FIELD_SIZE)]
            example_files.write_tfrecord(path, [part[:-50] for part in rows])
        data, path = self.bad_data(formats.TFRECORD, fewer_rows)
        self.assertRefused(r"^training file %s holds 850 rows, .*metadata.json says 900: the metadata and the files "
                           r"disagree" % path, data)

    def test_a_model_directory_of_another_model_is_refused(self):
        self.assertRefused(r"--model_dir .* holds checkpoints of another model.*model.model was 'deepfm', now 'dcn'",
                           model=small_model(model="dcn"))

    def test_a_model_directory_of_another_shape_is_refused(self):
        # Every variable that differs, one line each, after the first.
        self.assertRefused(r"checkpoint .* holds a model of another shape", model=small_model(embedding_size=6),
                           one_line=False)

    def test_a_model_directory_of_another_strategy_resumes(self):
        # Strategies keep the same variables (the ones that shard them save them whole): a change of
        # strategy is a scaling decision, logged, and training goes on from the checkpoint.
        with self.assertLogs(level="WARNING") as logs:
            result = self.run_job(self.data, self.model_dir, strategy=strategies.get(
                strategies.make_config("tower", device_type="cpu", num_devices=2)))
        # The budget is in examples: two towers take twice the rows a step (input_position).
        towers = 2
        budget = 2 * FIRST_STEPS * towers * BATCH
        self.assertEqual(FIRST_STEPS + (budget - FIRST_STEPS * BATCH) // (towers * BATCH), result.global_step)
        self.assertTrue(any("strategy.name changed: 'single' -> 'tower'" in line for line in logs.output), logs.output)
        # The checkpoint it resumed from still holds every variable it held, with the same values (the saver
        # writes the resumed step again as the run starts, so its files are not byte for byte the same).
        prefix = "model.ckpt-%d" % FIRST_STEPS
        before = tf.train.load_checkpoint(os.path.join(self.trained, prefix))
        after = tf.train.load_checkpoint(os.path.join(self.model_dir, prefix))
        for name in before.get_variable_to_shape_map():
            self.assertAllEqual(before.get_tensor(name), after.get_tensor(name), name)

    def test_a_saved_model_directory_that_is_not_one(self):
        work = self.create_tempdir().full_path
        broken = os.path.join(work, "export", "1795000000")
        os.makedirs(broken)
        with open(os.path.join(broken, "saved_model.pb"), "wb") as f:
            f.write(b"\x08\x96not a SavedModel")
        for saved_model, message in (
                (self.model_dir, "holds no SavedModel (saved_model.pb)"),
                (broken, "is not a readable SavedModel (Cannot parse file")):
            before = digests(saved_model)
            result = command_line.run(command_line.python_module(
                "deepfm.predict", "--saved_model", saved_model, "--data", self.data, "--output", "scores.csv"),
                cwd=work)
            self.assertNotEqual(0, result.returncode)
            errors = [line for line in result.stderr.splitlines() if "error" in line]
            self.assertLen(errors, 1, result.stderr)
            self.assertIn("--saved_model %r %s" % (saved_model, message), errors[0])
            self.assertEqual(before, digests(saved_model))
            self.assertFalse(os.path.exists(os.path.join(work, "scores.csv")))

    def test_the_command_line_names_a_bad_value_in_one_line(self):
        def nan_value(labels, ids, values):
            values[17, 5] = np.nan
        data, path = self.bad_data(formats.TFRECORD, lambda p: self.rewrite_tfrecord(p, nan_value))
        work = os.path.dirname(data)
        result = command_line.run(command_line.python_module(
            "deepfm.train", "--train_data", "data", "--model_dir", self.model_dir, "--batch_size", str(BATCH),
            "--embedding_size", "4", "--deep_layers", "8", "--dropout", "0", "--max_steps", str(2 * FIRST_STEPS),
            "--save_checkpoints_steps", str(FIRST_STEPS)), cwd=work)
        self.assertNotEqual(0, result.returncode)
        self.assertEqual(["deepfm.train: error: training file %s, record 17: value nan of field 5 (1 such value(s) "
                          "and 0 such label(s) in the input): fix or drop the rows" % path],
                         [line for line in result.stderr.splitlines() if "error" in line], result.stderr)
        self.assertEqual(self.before, digests(self.model_dir))


class PipeModeBadInputTest(tf.test.TestCase):

    def test_a_fifo_that_breaks_inside_a_record_is_named_and_nothing_is_saved_after_it(self):
        from input_pipeline import pipe_feeder
        root = self.create_tempdir().full_path
        data = os.path.join(root, "data")
        synthetic.generate(ROWS, data, feature_size=FEATURE_SIZE, seed=4, shards=SHARDS)
        model_dir = os.path.join(root, "model")
        BadInputTest.run_job(data, model_dir, max_steps=FIRST_STEPS)
        before = digests(model_dir)
        # The channel's stream ends 100 bytes into a record of the middle file: its writer closed it there.
        train = files.resolve([data], formats.TFRECORD)
        cut = os.path.join(root, "cut.tfrecord")
        with open(train[MIDDLE], "rb") as source, open(cut, "wb") as target:
            target.write(source.read(os.path.getsize(train[MIDDLE]) // 2 + 100))
        base_dir = os.path.join(root, "opt_ml")
        feeder = pipe_feeder.PipeFeeder(base_dir, {"train_0": [train[0], cut]}, epochs=1).start()
        self.addCleanup(feeder.stop)
        # The default FIFO timeout: the error must not wait it out (the read-ahead into the next epoch's FIFO,
        # which nobody feeds, is released when the failed session closes).
        input_config = pipeline.PipelineConfig(input_mode=pipeline.INPUT_MODE_PIPE, pipe_base_dir=base_dir,
                                               pipe_timeout_s=PIPE_TIMEOUT_S)
        start = time.monotonic()
        with self.assertRaisesRegex(ValueError, r"^Pipe-mode channel 'train_0': the stream of FIFO %s broke \(CRC "
                                    r"check on .* failed\): its writer closed it inside a record.*the latest: .*"
                                    r"model.ckpt-%d" % (os.path.join(base_dir, "input", "data", "train_0_0"),
                                                        FIRST_STEPS)):
            trainer.run(job_config.JobConfig(
                train=config.TrainConfig(model_dir=model_dir, train_files=(), batch_size=BATCH,
                                         max_steps=10 * FIRST_STEPS, save_checkpoints_steps=10 * FIRST_STEPS),
                model=small_model(), input=input_config,
                strategy=strategies.StrategyConfig(name="single", train_channels=("train_0",))))
        self.assertLess(time.monotonic() - start, PIPE_TIMEOUT_S / 2)
        after = digests(model_dir)
        # Every checkpoint it had, unchanged; none added (the session's start rewrote its record files).
        checkpoint_files = sorted(name for name in before if name.startswith("model.ckpt-"))
        self.assertEqual(checkpoint_files, sorted(name for name in after if name.startswith("model.ckpt-")))
        for name in checkpoint_files:
            if not name.endswith(".meta"):
                self.assertEqual(before[name], after[name], name)
        self.assertEqual(FIRST_STEPS, trainer.check_model_dir(model_dir, repair=False))


if __name__ == "__main__":
    tf.test.main()
