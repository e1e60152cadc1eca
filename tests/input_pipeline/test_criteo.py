"""Tests of the Criteo TSV converter, on hand-written lines and real rows."""

import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import tensorflow as tf
from absl.testing import parameterized

from input_pipeline import criteo, schema
from tests.input_pipeline import dataset_io

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_CRITEO_DIR = "/work/shared/data/criteo"
KAGGLE_HEAD_FILE = "criteo_kaggle_train_head8000.txt"
KAGGLE_ROWS_USED = 2000
NUM_DENSE = schema.NUM_DENSE_FIELDS
NUM_CATEGORICAL = schema.NUM_CATEGORICAL_FIELDS


def _line(label="0", ints=(), cats=()):
    """A Criteo TSV line; missing trailing fields are empty."""
    ints = list(ints) + [""] * (NUM_DENSE - len(ints))
    cats = list(cats) + [""] * (NUM_CATEGORICAL - len(cats))
    return "\t".join([label] + ints + cats)


def _varied_lines(n, seed=0):
    rng = np.random.default_rng(seed)
    lines = []
    for i in range(n):
        ints = [str(v) if rng.random() > 0.2 else "" for v in rng.integers(-2, 700, NUM_DENSE)]
        cats = ["%08x" % v for v in rng.integers(0, 6, NUM_CATEGORICAL)]
        cats[0] = "%08x" % i  # makes every line distinct
        lines.append(_line(str(int(rng.random() < 0.25)), ints, cats))
    return lines


def _sorted_lines(root, metadata, split):
    lines = []
    for stem in metadata.splits[split].shards:
        with open(os.path.join(root, stem + ".libsvm")) as f:
            lines.extend(f.read().splitlines())
    return sorted(lines)


def _bad_records(metadata):
    return int(re.search(r"(\d+) bad records skipped", metadata.source).group(1))


class CriteoTestCase(tf.test.TestCase):

    def new_dir(self):
        return tempfile.mkdtemp(dir=self.get_temp_dir())

    def write_input(self, lines, name="day.txt"):
        path = os.path.join(self.new_dir(), name)
        with open(path, "w") as f:
            f.write("".join(line + "\n" for line in lines))
        return path


class ConvertTest(CriteoTestCase, parameterized.TestCase):

    def test_round_trip_libsvm_tfrecord_and_features(self):
        lines = [
            _line("1", ["5", "-1", "", "25", "100000", "250"], ["68fd1e64", "80e26c9b", "", "x"]),
            _line("0", ["0", "300", "7"], ["68fd1e64", "f0cf0024", "", "y"]),
            _line("0", [], ["287e684f", "80e26c9b", "a", "x"]),
            _line("1", ["40", "600", "100"], ["68fd1e64", "0a519c5c", "a", "y"]),
            _line("0", ["1"], ["287e684f", "f0cf0024", "", "x"]),
        ]
        out = self.new_dir()
        meta = criteo.convert([self.write_input(lines)], out, val_fraction=0.0, shards=2, min_count=1)

        self.assertEqual(list(meta.splits), [schema.TRAIN_SPLIT])
        self.assertEqual(meta.splits["train"].shards, {"train/part-00000": 3, "train/part-00001": 2})
        self.assertEqual(meta.dense_clip, [float(c) for c in criteo.DENSE_CLIP])
        text = dataset_io.read_split(out, meta, "train", "libsvm")
        record = dataset_io.read_split(out, meta, "train", "tfrecord")
        for got_text, got_record in zip(text, record):
            self.assertAllEqual(got_text, got_record)
        labels, ids, values = text
        order = [0, 2, 4, 1, 3]  # shards are round-robin; read_split reads shard 0 then 1
        self.assertAllEqual(labels, [float(lines[i][0]) for i in order])
        self.assertAllEqual(ids[:, :NUM_DENSE], np.tile(np.arange(1, NUM_DENSE + 1), (5, 1)))
        # Line 0: I1 5/20, I2 -1 -> 0, I3 missing, I4 25/50, I5 100000 clipped to 1, I6 250/500.
        self.assertAllClose(values[0, :NUM_DENSE], [0.25, 0, 0, 0.5, 1, 0.5] + [0] * 7)
        # Line 1 (row 3): I2 300/600, I3 7/100.
        self.assertAllClose(values[3, :3], [0.0, 0.5, 0.07])
        self.assertAllEqual(values[:, NUM_DENSE:], np.ones((5, NUM_CATEGORICAL)))

        for f, name in enumerate(criteo.CATEGORICAL_NAMES):
            entry = meta.vocabulary[name]
            column = ids[:, NUM_DENSE + f]
            raw = [lines[i].split("\t")[1 + NUM_DENSE + f] for i in order]
            self.assertAllEqual(column, [entry["values"][value] for value in raw])
            self.assertTrue(np.all(column > entry["unknown_id"]), name)
        offsets = [meta.vocabulary[name]["offset"] for name in criteo.CATEGORICAL_NAMES]
        self.assertEqual(offsets[0], NUM_DENSE + 1)
        self.assertAllEqual(np.diff(offsets) > 0, [True] * (NUM_CATEGORICAL - 1))
        self.assertEqual(meta.feature_size, ids.max() + 1)
        # C1: 68fd1e64 three times, 287e684f twice: the most frequent value gets the first id.
        self.assertEqual(meta.vocabulary["C1"]["values"], {"68fd1e64": 15, "287e684f": 16})

    def test_min_count_maps_rare_values_to_unknown_id(self):
        lines = ([_line("0", ["1"], ["common", "", "z"])] * 3
                 + [_line("1", ["1"], ["rare", "", "z"]), _line("0", ["1"], ["common", "set", "z"])])
        out = self.new_dir()
        meta = criteo.convert([self.write_input(lines)], out, val_fraction=0.0, shards=1, min_count=2)
        c1, c2 = meta.vocabulary["C1"], meta.vocabulary["C2"]
        self.assertEqual(set(c1["values"]), {"common"})
        self.assertEqual(set(c2["values"]), {""})  # empty (missing) is a value of its own
        self.assertNotEqual(c2["values"][""], c2["unknown_id"])
        _, ids, _ = dataset_io.read_split(out, meta, "train", "tfrecord")
        self.assertAllEqual(ids[:, NUM_DENSE], [c1["values"]["common"]] * 3 + [c1["unknown_id"]]
                            + [c1["values"]["common"]])
        self.assertEqual(ids[4, NUM_DENSE + 1], c2["unknown_id"])

    @parameterized.named_parameters(("dataset_root", False), ("metadata_file", True))
    def test_saved_vocabulary_maps_unseen_values_to_unknown_ids(self, point_at_file):
        first = [_line("0", ["3"], ["a", "b", "c"]), _line("1", ["4"], ["a", "d", "c"])]
        root = self.new_dir()
        built = criteo.convert([self.write_input(first)], root, val_fraction=0.0, shards=1, min_count=1)
        vocab = os.path.join(root, schema.METADATA_FILE) if point_at_file else root
        second = [_line("1", ["9"], ["a", "new", "c", "new"]), _line("0", [], ["unseen", "d", "", ""])]
        out = self.new_dir()
        meta = criteo.convert([self.write_input(second)], out, val_fraction=0.0, shards=1, vocab=vocab)

        self.assertEqual(meta.vocabulary, built.vocabulary)
        self.assertEqual(meta.feature_size, built.feature_size)
        self.assertIn(vocab, meta.source)
        voc = built.vocabulary

        def known(field, value):
            return voc[field]["values"][value]

        def unknown(field):
            return voc[field]["unknown_id"]

        _, ids, _ = dataset_io.read_split(out, meta, "train", "libsvm")
        self.assertAllEqual(ids[0, NUM_DENSE:NUM_DENSE + 4],
                            [known("C1", "a"), unknown("C2"), known("C3", "c"), unknown("C4")])
        self.assertAllEqual(ids[1, NUM_DENSE:NUM_DENSE + 4],
                            [unknown("C1"), known("C2", "d"), unknown("C3"), known("C4", "")])
        self.assertLess(ids.max(), meta.feature_size)

    def test_min_count_with_vocab_is_refused(self):
        path = self.write_input([_line()])
        with self.assertRaisesRegex(ValueError, "min_count.*vocab"):
            criteo.convert([path], self.new_dir(), vocab=self.new_dir(), min_count=3)

    def test_split_is_deterministic_and_follows_line_content(self):
        lines = _varied_lines(200)
        path = self.write_input(lines)
        first, second, reordered = self.new_dir(), self.new_dir(), self.new_dir()
        options = dict(val_fraction=0.3, shards=3, min_count=2)
        meta = criteo.convert([path], first, **options)
        criteo.convert([path], second, **options)
        self.assertEqual(dataset_io.read_tree(first), dataset_io.read_tree(second))

        validation = meta.splits["validation"].rows
        self.assertEqual(meta.splits["train"].rows + validation, 200)
        self.assertBetween(validation, 30, 90)
        reordered_meta = criteo.convert([self.write_input(lines[::-1])], reordered, **options)
        self.assertEqual(reordered_meta.vocabulary, meta.vocabulary)
        for split in ("train", "validation"):
            self.assertEqual(_sorted_lines(first, meta, split), _sorted_lines(reordered, reordered_meta, split))

    @parameterized.named_parameters(
        ("too_few_fields", "\t".join(["0"] * 39), "expected 40 tab-separated fields, got 39"),
        ("float_integer_field", _line("0", ["1.5"]), "I1 must be an integer or empty, got '1.5'"),
        ("text_integer_field", _line("0", ["1", "abc"]), "I2 must be an integer or empty, got 'abc'"),
        ("label_not_binary", _line("2"), "label must be 0 or 1, got '2'"),
        ("label_missing", _line(""), "label must be 0 or 1, got ''"),
    )
    def test_malformed_line_names_file_and_line(self, bad_line, reason):
        good = _varied_lines(4)
        path = self.write_input(good[:2] + [bad_line] + good[2:])
        out = os.path.join(self.new_dir(), "out")
        with self.assertRaises(criteo.MalformedRecordError) as caught:
            criteo.convert([path], out, min_count=1)
        self.assertIn("%s:3: %s" % (path, reason), str(caught.exception))
        self.assertEqual(caught.exception.line_number, 3)
        self.assertFalse(os.path.exists(out), "nothing may be written before the input is checked")

        meta = criteo.convert([path], out, min_count=1, skip_bad_records=True)
        self.assertEqual(_bad_records(meta), 1)
        self.assertEqual(sum(info.rows for info in meta.splits.values()), 4)

    def test_skip_bad_records_counts_over_several_files(self):
        first = self.write_input(_varied_lines(3) + ["garbage"])
        second = self.write_input(["1\t2"] + _varied_lines(2, seed=1) + [_line("x")], name="day2.txt")
        meta = criteo.convert([first, second], self.new_dir(), val_fraction=0.0, min_count=1,
                              skip_bad_records=True)
        self.assertEqual(_bad_records(meta), 3)
        self.assertEqual(meta.splits["train"].rows, 5)

    def test_refuses_existing_dataset_unless_overwrite(self):
        path = self.write_input(_varied_lines(10))
        out = self.new_dir()
        criteo.convert([path], out, val_fraction=0.0, shards=2, min_count=1)
        before = dataset_io.read_tree(out)
        with self.assertRaisesRegex(FileExistsError, "already holds a dataset.*--overwrite"):
            criteo.convert([path], out, val_fraction=0.0, shards=1, min_count=1)
        self.assertEqual(dataset_io.read_tree(out), before)

        meta = criteo.convert([path], out, val_fraction=0.0, shards=1, min_count=1, overwrite=True)
        self.assertEqual(list(meta.splits["train"].shards), ["train/part-00000"])
        self.assertEqual(sorted(dataset_io.read_tree(out)),
                         ["metadata.json", "train/part-00000.libsvm", "train/part-00000.tfrecord"])

    def test_missing_or_empty_input_fails_before_writing(self):
        out = os.path.join(self.new_dir(), "out")
        missing = os.path.join(self.new_dir(), "nope.txt")
        with self.assertRaisesRegex(FileNotFoundError, re.escape(missing)):
            criteo.convert([missing], out)
        empty = self.write_input([])
        with self.assertRaisesRegex(ValueError, re.escape(empty) + ".* is empty"):
            criteo.convert([self.write_input([_line()]), empty], out)
        with self.assertRaisesRegex(ValueError, "no input files"):
            criteo.convert([], out)
        self.assertFalse(os.path.exists(out))

    @parameterized.named_parameters(
        ("val_fraction", dict(val_fraction=1.0), "val_fraction must be in \\[0, 1\\), got 1.0"),
        ("shards", dict(shards=0), "shards must be >= 1, got 0"),
        ("min_count", dict(min_count=0), "min_count must be >= 1, got 0"),
    )
    def test_bad_arguments(self, options, message):
        with self.assertRaisesRegex(ValueError, message):
            criteo.convert([self.write_input([_line()])], self.new_dir(), **options)


class CommandLineTest(CriteoTestCase):

    def test_cli_converts_files_and_refuses_to_overwrite(self):
        first = self.write_input(_varied_lines(6))
        second = self.write_input(_varied_lines(4, seed=1), name="day2.txt")
        out = self.new_dir()
        command = [sys.executable, "-m", "input_pipeline.criteo", "--output_dir", out, "--val_fraction", "0",
                   "--shards", "1", "--min_count", "1", "--input", first, second]
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        result = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertRegex(result.stdout, r"train\s+10 rows in 1 shards")
        self.assertEqual(schema.DatasetMetadata.read(out).splits["train"].rows, 10)

        again = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
        self.assertNotEqual(again.returncode, 0)
        self.assertIn("--overwrite", again.stderr)


class KaggleRowsTest(CriteoTestCase):

    def test_first_kaggle_rows(self):
        source = os.path.join(os.environ.get("CRITEO_DATA_DIR", DEFAULT_CRITEO_DIR), KAGGLE_HEAD_FILE)
        if not os.path.isfile(source):
            self.skipTest("real Criteo rows not found at %s (set CRITEO_DATA_DIR)" % source)
        with open(source) as f:
            lines = [next(f).rstrip("\n") for _ in range(KAGGLE_ROWS_USED)]
        expected_positives = sum(line.split("\t")[0] == "1" for line in lines)
        out = self.new_dir()
        meta = criteo.convert([self.write_input(lines)], out, val_fraction=0.1, shards=2, min_count=2)

        self.assertEqual(_bad_records(meta), 0)
        self.assertEqual(sum(info.rows for info in meta.splits.values()), KAGGLE_ROWS_USED)
        positives = 0
        for split, info in meta.splits.items():
            self.assertEqual(sum(info.shards.values()), info.rows)
            for stem, rows in info.shards.items():
                text = dataset_io.read_libsvm(os.path.join(out, stem + ".libsvm"))
                record = dataset_io.read_tfrecord(os.path.join(out, stem + ".tfrecord"))
                self.assertLen(text[0], rows)
                for got_text, got_record in zip(text, record):
                    self.assertAllEqual(got_text, got_record)
                labels, ids, values = text
                positives += int(labels.sum())
                self.assertLess(ids.max(), meta.feature_size)
                self.assertAllInRange(values, 0.0, 1.0)
        self.assertEqual(positives, expected_positives)
        self.assertBetween(meta.splits["validation"].rows, 100, 320)
        self.assertIn("(%d positive)" % expected_positives, meta.source)


if __name__ == "__main__":
    tf.test.main()
