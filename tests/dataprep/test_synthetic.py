"""Tests of the synthetic dataset generator and its planted model."""

import itertools
import os
import shutil
import tempfile

import numpy as np
import tensorflow as tf
from absl.testing import parameterized

from dataprep import criteo, synthetic
from input_pipeline import formats, schema
from tests import command_line
from tests.input_pipeline import dataset_io

ROWS = 3000
FEATURE_SIZE = 5000
VAL_FRACTION = 0.3
SHARDS = 3
SEED = 7


def _pairwise_auc(labels, scores):
    """AUC by comparing every positive with every negative (ties count 1/2)."""
    positive = scores[labels > 0.5][:, None]
    negative = scores[labels < 0.5][None, :]
    return float(np.mean((positive > negative) + 0.5 * (positive == negative)))


def _explicit_fm_logits(params, ids, values):
    """bias + sum_i w_i x_i + sum over field pairs i < j of <v_i, v_j> x_i x_j, pair by pair."""
    w, v = params["weights"].astype(np.float64), params["factors"].astype(np.float64)
    x = values.astype(np.float64)
    logits = float(params["bias"]) + (w[ids] * x).sum(axis=1)
    for i, j in itertools.combinations(range(ids.shape[1]), 2):
        logits += (v[ids[:, i]] * v[ids[:, j]]).sum(axis=1) * x[:, i] * x[:, j]
    return logits


class GenerateTest(tf.test.TestCase, parameterized.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.root = tempfile.mkdtemp()
        cls.meta = synthetic.generate(ROWS, cls.root, feature_size=FEATURE_SIZE, val_fraction=VAL_FRACTION,
                                      shards=SHARDS, seed=SEED, chunk_rows=700)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.root)
        super().tearDownClass()

    def new_dir(self):
        return tempfile.mkdtemp(dir=self.get_temp_dir())

    def test_metadata_matches_files(self):
        meta = schema.DatasetMetadata.read(self.root)
        self.assertEqual(meta, self.meta)
        self.assertEqual(meta.feature_size, FEATURE_SIZE)
        self.assertEqual(meta.field_size, schema.FIELD_SIZE)
        self.assertEqual(meta.dense_clip, [float(c) for c in criteo.DENSE_CLIP])
        validation_rows = round(ROWS * VAL_FRACTION)
        self.assertEqual(meta.splits["validation"].rows, validation_rows)
        self.assertEqual(meta.splits["train"].rows, ROWS - validation_rows)
        expected_files = {synthetic.PLANTED_MODEL_FILE, schema.METADATA_FILE}
        for split, info in meta.splits.items():
            # The split folder's own metadata: the same sizes, its shards relative to it.
            expected_files.add(split + "/" + schema.METADATA_FILE)
            view = schema.DatasetMetadata.read(os.path.join(self.root, split))
            self.assertEqual((split, meta.feature_size, meta.field_size, meta.planted_auc),
                             (view.split, view.feature_size, view.field_size, view.planted_auc))
            self.assertEqual({split: schema.SplitInfo(info.rows, {stem[len(split) + 1:]: rows
                                                                  for stem, rows in info.shards.items()})},
                             view.splits)
            self.assertLen(info.shards, SHARDS)
            self.assertEqual(sum(info.shards.values()), info.rows)
            for stem, rows in info.shards.items():
                self.assertTrue(stem.startswith(split + "/part-"), stem)
                expected_files.update(stem + ext for ext in formats.extensions().values())
                text = dataset_io.read_libsvm(os.path.join(self.root, stem + ".libsvm"))
                record = dataset_io.read_tfrecord(os.path.join(self.root, stem + ".tfrecord"))
                self.assertLen(text[0], rows)
                for got_text, got_record in zip(text, record):
                    self.assertAllEqual(got_text, got_record)
        self.assertEqual(set(dataset_io.read_tree(self.root)), expected_files)

    def test_features_are_criteo_shaped(self):
        labels, ids, values = dataset_io.read_split(self.root, self.meta, "train", "tfrecord")
        self.assertAllEqual(ids[:, :schema.NUM_DENSE_FIELDS],
                            np.tile(np.arange(1, schema.NUM_DENSE_FIELDS + 1), (len(ids), 1)))
        self.assertAllInRange(values[:, :schema.NUM_DENSE_FIELDS], 0.0, 1.0)
        missing = np.mean(values[:, :schema.NUM_DENSE_FIELDS] == 0.0, axis=0)
        self.assertGreater(missing[11], 0.6)  # I12 is missing most often
        self.assertAllEqual(values[:, schema.NUM_DENSE_FIELDS:], np.ones((len(ids), schema.NUM_CATEGORICAL_FIELDS)))
        categorical = ids[:, schema.NUM_DENSE_FIELDS:]
        self.assertGreaterEqual(categorical.min(), criteo.FIRST_CATEGORICAL_ID)
        self.assertLess(categorical.max(), FEATURE_SIZE)
        bounds = criteo.FIRST_CATEGORICAL_ID + np.cumsum([0] + synthetic.field_vocab_sizes(FEATURE_SIZE))
        self.assertEqual(bounds[-1], FEATURE_SIZE)
        for f in range(schema.NUM_CATEGORICAL_FIELDS):
            self.assertAllInRange(categorical[:, f], bounds[f], bounds[f + 1] - 1)
        # Zipf: in the largest field the most frequent id is far above uniform.
        _, counts = np.unique(categorical[:, -1], return_counts=True)
        self.assertGreater(counts.max() / len(ids), 20.0 / (bounds[-1] - bounds[-2]))
        self.assertBetween(labels.mean(), 0.18, 0.32)

    def test_planted_auc_equals_independent_recomputation(self):
        self.assertBetween(self.meta.planted_auc, 0.72, 0.9)
        params = np.load(os.path.join(self.root, synthetic.PLANTED_MODEL_FILE))
        self.assertEqual(params["weights"].shape, (FEATURE_SIZE,))
        labels, ids, values = dataset_io.read_split(self.root, self.meta, "validation", "libsvm")
        logits = _explicit_fm_logits(params, ids, values)
        self.assertAllClose(self.meta.planted_auc, _pairwise_auc(labels, logits), atol=1e-9, rtol=0)
        # The labels follow the planted probabilities: their mean agrees within noise.
        train_labels, train_ids, train_values = dataset_io.read_split(self.root, self.meta, "train", "libsvm")
        probabilities = 1 / (1 + np.exp(-_explicit_fm_logits(params, train_ids, train_values)))
        tolerance = 4 * np.sqrt(np.sum(probabilities * (1 - probabilities))) / len(train_labels)
        self.assertAllClose(train_labels.mean(), probabilities.mean(), atol=tolerance)

    def test_same_seed_same_bytes_other_seed_differs(self):
        options = dict(feature_size=FEATURE_SIZE, val_fraction=VAL_FRACTION, shards=SHARDS, seed=SEED)
        again = self.new_dir()
        synthetic.generate(ROWS, again, chunk_rows=700, **options)
        self.assertEqual(dataset_io.read_tree(again), dataset_io.read_tree(self.root))
        other = self.new_dir()
        options["seed"] = SEED + 1
        synthetic.generate(ROWS, other, chunk_rows=700, **options)
        self.assertNotEqual(dataset_io.read_tree(other)["train/part-00000.libsvm"],
                            dataset_io.read_tree(self.root)["train/part-00000.libsvm"])

    def test_no_validation_split(self):
        out = self.new_dir()
        meta = synthetic.generate(50, out, feature_size=FEATURE_SIZE, val_fraction=0.0, shards=2)
        self.assertEqual(list(meta.splits), ["train"])
        self.assertEqual(meta.splits["train"].rows, 50)
        self.assertIsNone(meta.planted_auc)
        self.assertFalse(os.path.exists(os.path.join(out, schema.VALIDATION_SPLIT)))

    def test_refuses_existing_dataset_unless_overwrite(self):
        out = self.new_dir()
        synthetic.generate(20, out, feature_size=FEATURE_SIZE, shards=2)
        with self.assertRaisesRegex(FileExistsError, "--overwrite"):
            synthetic.generate(20, out, feature_size=FEATURE_SIZE, shards=1)
        meta = synthetic.generate(20, out, feature_size=FEATURE_SIZE, shards=1, overwrite=True)
        self.assertLen(meta.splits["train"].shards, 1)
        self.assertNotIn("train/part-00001.libsvm", dataset_io.read_tree(out))

    @parameterized.named_parameters(
        ("rows", dict(rows=0), "rows must be >= 1, got 0"),
        ("val_fraction", dict(val_fraction=-0.1), r"val_fraction must be in \[0, 1\), got -0.1"),
        ("shards", dict(shards=0), "shards must be >= 1, got 0"),
        ("feature_size", dict(feature_size=20), "feature_size must be >= 66 .*, got 20"),
    )
    def test_bad_arguments(self, overrides, message):
        options = dict(rows=10, output_dir=os.path.join(self.new_dir(), "out"), feature_size=FEATURE_SIZE)
        options.update(overrides)
        with self.assertRaisesRegex(ValueError, message):
            synthetic.generate(**options)
        self.assertFalse(os.path.exists(options["output_dir"]))


class AucTest(tf.test.TestCase):

    def test_rank_auc_equals_pairwise_auc_with_ties(self):
        rng = np.random.default_rng(0)
        labels = (rng.random(400) < 0.3).astype(np.float32)
        scores = np.round(rng.normal(size=400) + labels, 1)  # rounding makes many ties
        self.assertAllClose(synthetic.auc(labels, scores), _pairwise_auc(labels, scores), atol=1e-12, rtol=0)

    def test_single_class_is_an_error(self):
        with self.assertRaisesRegex(ValueError, "both classes"):
            synthetic.auc(np.zeros(5), np.arange(5.0))


class FieldSizesTest(tf.test.TestCase, parameterized.TestCase):

    @parameterized.parameters(66, 1000, synthetic.DEFAULT_FEATURE_SIZE)
    def test_sizes_fill_feature_size(self, feature_size):
        sizes = synthetic.field_vocab_sizes(feature_size)
        self.assertLen(sizes, schema.NUM_CATEGORICAL_FIELDS)
        self.assertEqual(criteo.FIRST_CATEGORICAL_ID + sum(sizes), feature_size)
        self.assertGreaterEqual(min(sizes), synthetic.MIN_FIELD_VOCAB)


class CommandLineTest(tf.test.TestCase):

    def test_cli_writes_dataset(self):
        cwd = tempfile.mkdtemp(dir=self.get_temp_dir())
        command = command_line.python_module("dataprep.synthetic", "--rows", "500", "--output_dir", "data/synthetic",
                                             "--feature_size", "3000", "--shards", "2", "--seed", "3")
        result = command_line.run(command, cwd, timeout=120)
        self.assertEqual(result.returncode, 0, command_line.describe(command, result))
        meta = schema.DatasetMetadata.read(os.path.join(cwd, "data/synthetic"))
        self.assertEqual(meta.splits["train"].rows + meta.splits["validation"].rows, 500)
        self.assertIn("planted_auc: %s" % meta.planted_auc, result.stdout)


if __name__ == "__main__":
    tf.test.main()
