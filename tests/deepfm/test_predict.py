"""Tests of batch prediction: `python -m deepfm.predict` against the SavedModel's own serving signature."""

import csv
import os
import tempfile

import numpy as np
import tensorflow as tf
from absl.testing import parameterized

import strategies
from dataprep import synthetic
from deepfm import config, job_config, predict
from deepfm.models import ctr
from deepfm.runtime import trainer
from input_pipeline import files, formats, pipeline, schema
from tests import command_line

ROWS = 2_500
FEATURE_SIZE = 300
BATCH = 128
# float32 probabilities written with 9 significant digits.
PROB_TOLERANCE = 1e-6


def read_csv(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], rows[1:]


def read_examples(paths, field_size):
    """Every example of TFRecord `paths`, in order, without the pipeline: (ids, values, labels)."""
    ids, values, labels = [], [], []
    for path in paths:
        for record in tf.data.TFRecordDataset(path).as_numpy_iterator():
            feature = tf.train.Example.FromString(record).features.feature
            ids.append(list(feature[schema.IDS_KEY].int64_list.value))
            values.append(list(feature[schema.VALUES_KEY].float_list.value))
            labels.append(feature[schema.LABEL_KEY].float_list.value[0])
    return (np.array(ids, np.int64).reshape(-1, field_size), np.array(values, np.float32).reshape(-1, field_size),
            np.array(labels, np.float32))


class PredictTest(tf.test.TestCase, parameterized.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.root = tempfile.mkdtemp(dir=tf.compat.v1.test.get_temp_dir())
        cls.data_dir = os.path.join(cls.root, "data")
        cls.metadata = synthetic.generate(ROWS, cls.data_dir, feature_size=FEATURE_SIZE, seed=4, shards=3)
        model_dir = os.path.join(cls.root, "model")
        train = config.TrainConfig(
            model_dir=model_dir, train_files=tuple(files.resolve([cls.data_dir], "tfrecord")),
            export_dir=os.path.join(model_dir, "export"), batch_size=BATCH, max_steps=30, seed=1)
        model = config.ModelConfig(feature_size=FEATURE_SIZE, embedding_size=4, deep_layers=(8,), dropout=(0.0,))
        cls.result = trainer.run(job_config.JobConfig(train=train, model=model, input=pipeline.PipelineConfig(),
                                                      strategy=strategies.StrategyConfig(name="single")))
        cls.val_files = files.default_validation([cls.data_dir], "tfrecord")

    def expected(self, paths):
        """The serving signature called directly on every example, in file order."""
        ids, values, labels = read_examples(paths, schema.FIELD_SIZE)
        signature = tf.saved_model.load(self.result.export_path).signatures["serving_default"]
        prob = signature(feat_ids=tf.constant(ids), feat_vals=tf.constant(values))[ctr.SERVING_SIGNATURE_OUTPUT]
        return prob.numpy().reshape(-1), labels

    def test_cli_writes_the_signature_probabilities_in_input_order(self):
        cwd = self.root
        output = os.path.join(self.get_temp_dir(), "out", "predictions.csv")
        command = command_line.python_module(
            "deepfm.predict", "--saved_model", os.path.relpath(self.result.export_path, cwd),
            "--data", "data/validation", "--output", os.path.relpath(output, cwd), "--batch_size", "64")
        proc = command_line.run(command, cwd, timeout=300)
        self.assertEqual(0, proc.returncode, command_line.describe(command, proc))
        self.assertRegex(proc.stdout, r"scored %d rows in [\d.]+ s \([\d,]+ rows/sec\)" % len(self.expected(
            self.val_files)[0]))
        header, rows = read_csv(output)
        self.assertEqual(["prob", "label"], header)
        prob, labels = self.expected(self.val_files)
        self.assertLen(rows, len(prob))
        self.assertAllClose(prob, [float(r[0]) for r in rows], atol=PROB_TOLERANCE)
        self.assertAllEqual(labels, [float(r[1]) for r in rows])

    def test_every_format_gives_the_same_predictions(self):
        tfrecord_out = os.path.join(self.get_temp_dir(), "tfrecord.csv")
        predict.write_predictions(self.result.export_path, [self.data_dir], "tfrecord", tfrecord_out)
        _, by_tfrecord = read_csv(tfrecord_out)
        for data_format in ("libsvm", "tfrecord_packed"):
            output = os.path.join(self.get_temp_dir(), data_format + ".csv")
            rows, _ = predict.write_predictions(self.result.export_path, [self.data_dir], data_format, output)
            self.assertEqual(len(self.expected(self.val_files)[0]), rows)
            _, by_format = read_csv(output)
            self.assertAllClose(np.array(by_tfrecord, float), np.array(by_format, float), atol=PROB_TOLERANCE)

    @parameterized.parameters(1, 5)
    def test_unlabelled_records_give_a_prob_column_only(self, rows_per_record):
        # One row per record is TFRecord; more, packed TFRecord.
        data_format = formats.TFRECORD if rows_per_record == 1 else formats.TFRECORD_PACKED
        path = os.path.join(self.get_temp_dir(), "unlabelled" + data_format.extension)
        ids, values, _ = read_examples(self.val_files[:1], schema.FIELD_SIZE)
        with tf.io.TFRecordWriter(path) as writer:
            for start in range(0, len(ids), rows_per_record):
                part = slice(start, start + rows_per_record)
                writer.write(tf.train.Example(features=tf.train.Features(feature={
                    schema.IDS_KEY: tf.train.Feature(int64_list=tf.train.Int64List(value=ids[part].ravel())),
                    schema.VALUES_KEY: tf.train.Feature(float_list=tf.train.FloatList(value=values[part].ravel())),
                })).SerializeToString())
        output = os.path.join(self.get_temp_dir(), "unlabelled.csv")
        predict.write_predictions(self.result.export_path, [path], data_format, output, batch_size=7)
        header, rows = read_csv(output)
        self.assertEqual(["prob"], header)
        self.assertAllClose(self.expected(self.val_files[:1])[0], [float(r[0]) for r in rows], atol=PROB_TOLERANCE)

    def test_bad_inputs_are_named(self):
        existing = os.path.join(self.get_temp_dir(), "exists.csv")
        with open(existing, "w") as f:
            f.write("prob\n")
        with self.assertRaisesRegex(ValueError, "--output .*exists.csv' exists"):
            predict.write_predictions(self.result.export_path, [self.data_dir], "tfrecord", existing)
        with self.assertRaisesRegex(ValueError, "--saved_model .*holds no SavedModel"):
            predict.write_predictions(self.root, [self.data_dir], "tfrecord",
                                      os.path.join(self.get_temp_dir(), "never.csv"))
        with self.assertRaisesRegex(ValueError,
                                    "data_format must be one of tfrecord, tfrecord_packed, libsvm, got 'csv'"):
            predict.write_predictions(self.result.export_path, [self.data_dir], "csv",
                                      os.path.join(self.get_temp_dir(), "never.csv"))


if __name__ == "__main__":
    tf.test.main()
