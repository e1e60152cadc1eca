"""Tests of the Criteo TSV converter, on hand-written lines and real rows."""

import collections
import dataclasses
import errno
import os
import re
import tempfile
import zlib
from unittest import mock

import numpy as np
import pytest
import tensorflow as tf
from absl import flags
from absl.testing import parameterized

from cli import config_flags
from dataprep import criteo, raw_criteo
from dataprep.criteo import command, writing
from input_pipeline import schema
from tests import command_line, paths
from tests.input_pipeline import dataset_io

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

    def generated_input(self, rows=3000, distinct=6000, seed=0):
        path = os.path.join(self.new_dir(), "raw.tsv")
        raw_criteo.write(raw_criteo.RawSpec(rows, distinct, seed), path)
        return path

    def convert_per_workers(self, path, options, workers=(1, 2), spilled=True, **more):
        """The dataset tree written with each number of workers (and each of `more`'s values)."""
        trees = []
        for count in workers:
            out = self.new_dir()
            _, report = criteo.convert_with_report([path], out, criteo.ConversionOptions(workers=count, **options,
                                                                                         **more))
            self.assertEqual(report.workers, count)
            if spilled:
                self.assertGreater(report.spilled_runs, 0)
            else:
                self.assertEqual(report.spilled_runs, 0)
            trees.append(dataset_io.read_tree(out))
        return trees


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
        meta = criteo.convert([self.write_input(lines)], out, criteo.ConversionOptions(val_fraction=0.0, shards=2,
                                                                                       min_count=1))

        self.assertEqual(list(meta.splits), [schema.TRAIN_SPLIT])
        self.assertEqual(meta.splits["train"].shards, {"train/part-00000": 3, "train/part-00001": 2})
        view = schema.DatasetMetadata.read(os.path.join(out, "train"))
        self.assertEqual(("train", {"part-00000": 3, "part-00001": 2}, meta.feature_size, {}),
                         (view.split, view.splits["train"].shards, view.feature_size, view.vocabulary))
        with self.assertRaisesRegex(ValueError, "is the metadata of the 'train' split folder, which has no "
                                    "vocabulary: give the dataset root"):
            criteo.convert([self.write_input(lines)], self.new_dir(),
                           criteo.ConversionOptions(vocab=os.path.join(out, "train")))
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
        meta = criteo.convert([self.write_input(lines)], out, criteo.ConversionOptions(val_fraction=0.0, shards=1,
                                                                                       min_count=2))
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
        built = criteo.convert([self.write_input(first)], root, criteo.ConversionOptions(val_fraction=0.0, shards=1,
                                                                                         min_count=1))
        vocab = os.path.join(root, schema.METADATA_FILE) if point_at_file else root
        second = [_line("1", ["9"], ["a", "new", "c", "new"]), _line("0", [], ["unseen", "d", "", ""])]
        out = self.new_dir()
        meta = criteo.convert([self.write_input(second)], out, criteo.ConversionOptions(val_fraction=0.0, shards=1,
                                                                                        vocab=vocab))

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
            criteo.convert([path], self.new_dir(), criteo.ConversionOptions(vocab=self.new_dir(), min_count=3))

    def test_split_is_deterministic_and_follows_line_content(self):
        lines = _varied_lines(200)
        path = self.write_input(lines)
        first, second, reordered = self.new_dir(), self.new_dir(), self.new_dir()
        options = dict(val_fraction=0.3, shards=3, min_count=2)
        meta = criteo.convert([path], first, criteo.ConversionOptions(**options))
        criteo.convert([path], second, criteo.ConversionOptions(**options))
        self.assertEqual(dataset_io.read_tree(first), dataset_io.read_tree(second))

        validation = meta.splits["validation"].rows
        self.assertEqual(meta.splits["train"].rows + validation, 200)
        self.assertBetween(validation, 30, 90)
        reordered_meta = criteo.convert([self.write_input(lines[::-1])], reordered, criteo.ConversionOptions(**options))
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
            criteo.convert([path], out, criteo.ConversionOptions(min_count=1))
        self.assertIn("%s:3: %s" % (path, reason), str(caught.exception))
        self.assertEqual(caught.exception.line_number, 3)
        self.assertFalse(os.path.exists(out), "nothing may be written before the input is checked")

        meta = criteo.convert([path], out, criteo.ConversionOptions(min_count=1, skip_bad_records=True))
        self.assertEqual(_bad_records(meta), 1)
        self.assertEqual(sum(info.rows for info in meta.splits.values()), 4)

    def test_skip_bad_records_counts_over_several_files(self):
        first = self.write_input(_varied_lines(3) + ["garbage"])
        second = self.write_input(["1\t2"] + _varied_lines(2, seed=1) + [_line("x")], name="day2.txt")
        meta = criteo.convert([first, second], self.new_dir(), criteo.ConversionOptions(val_fraction=0.0, min_count=1,
                                                                                        skip_bad_records=True))
        self.assertEqual(_bad_records(meta), 3)
        self.assertEqual(meta.splits["train"].rows, 5)

    def test_refuses_existing_dataset_unless_overwrite(self):
        path = self.write_input(_varied_lines(10))
        out = self.new_dir()
        criteo.convert([path], out, criteo.ConversionOptions(val_fraction=0.0, shards=2, min_count=1))
        before = dataset_io.read_tree(out)
        with self.assertRaisesRegex(FileExistsError, "already holds a dataset.*--overwrite"):
            criteo.convert([path], out, criteo.ConversionOptions(val_fraction=0.0, shards=1, min_count=1))
        self.assertEqual(dataset_io.read_tree(out), before)

        meta = criteo.convert([path], out, criteo.ConversionOptions(val_fraction=0.0, shards=1, min_count=1,
                                                                    overwrite=True))
        self.assertEqual(list(meta.splits["train"].shards), ["train/part-00000"])
        self.assertEqual(sorted(dataset_io.read_tree(out)),
                         ["metadata.json", "train/metadata.json", "train/part-00000.libsvm",
                          "train/part-00000.tfrecord", "train/part-00000.tfrecord-packed"])

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
        ("workers", dict(workers=0), "workers must be >= 1, got 0"),
        ("memory_mb", dict(memory_mb=0), "memory_mb must be > 0, got 0"),
        ("chunk_bytes", dict(chunk_bytes=0), "chunk_bytes must be >= 1, got 0"),
        ("libsvm_layout", dict(libsvm_layout="wide"), "libsvm_layout must be one of fixed, compact, got 'wide'"),
    )
    def test_bad_options_are_refused_when_made(self, options, message):
        with self.assertRaisesRegex(ValueError, message):
            criteo.ConversionOptions(**options)


def _kaggle_lines(count):
    source = os.path.join(paths.CRITEO_DIR, KAGGLE_HEAD_FILE)
    if not os.path.isfile(source):
        return None, source
    with open(source) as f:
        return [next(f).rstrip("\n") for _ in range(count)], source


def _reference_vocabulary(lines, val_fraction, min_count):
    """The vocabulary counted the simplest way: Python dicts over `parse_line`, no numpy."""
    threshold = int(val_fraction * 2**32)
    counts = [collections.Counter() for _ in criteo.CATEGORICAL_NAMES]
    for line in lines:
        if zlib.crc32(line.encode()) < threshold:
            continue
        for field_counts, value in zip(counts, criteo.parse_line(line).categorical):
            field_counts[value] += 1
    return criteo.Vocabulary.build(counts, min_count)


class ScaleTest(CriteoTestCase, parameterized.TestCase):
    """Bounded memory, byte ranges, shuffling and sampling: same rows, same ids."""

    def test_spilling_to_disk_equals_counting_in_memory(self):
        path = self.generated_input(rows=1500, distinct=3000)
        options = dict(val_fraction=0.2, shards=3, min_count=3, workers=1)
        in_memory, in_memory_report = criteo.convert_with_report([path], self.new_dir(),
                                                                 criteo.ConversionOptions(**options))
        self.assertEqual(in_memory_report.spilled_runs, 0)
        with open(path) as f:
            lines = f.read().splitlines()
        self.assertEqual(in_memory.vocabulary, _reference_vocabulary(lines, 0.2, 3).fields)
        self.assertGreater(sum(criteo.Vocabulary(in_memory.vocabulary).sizes()), 50)

        out = self.new_dir()
        bounded, bounded_report = criteo.convert_with_report([path], out, criteo.ConversionOptions(memory_mb=0.05,
                                                                                                   chunk_bytes=100_000,
                                                                                                   **options))
        self.assertGreater(bounded_report.spilled_runs, 26, "a 50 KB budget must force the counts to disk")
        self.assertEqual(bounded.vocabulary, in_memory.vocabulary)
        self.assertEqual(dataset_io.read_tree(out), dataset_io.read_tree(self.convert_again(path, options)))

    def convert_again(self, path, options, **more):
        out = self.new_dir()
        criteo.convert([path], out, criteo.ConversionOptions(**dict(options, **more)))
        return out

    def test_byte_ranges_cut_anywhere_give_the_same_dataset(self):
        lines = _varied_lines(60)
        crlf = [line + "\r" for line in _varied_lines(10, seed=5)]
        path = self.write_input(lines[:30] + crlf + lines[30:])
        with open(path, "ab") as f:
            f.write(_varied_lines(1, seed=9)[0].encode())  # a last line without a line break
        options = dict(val_fraction=0.25, shards=2, min_count=2, workers=1)
        expected = dataset_io.read_tree(self.convert_again(path, options))
        for chunk_bytes in (150, 1000, 4096):
            self.assertEqual(dataset_io.read_tree(self.convert_again(path, options, chunk_bytes=chunk_bytes)),
                             expected, "chunk_bytes=%d" % chunk_bytes)
        meta = schema.DatasetMetadata.read(self.convert_again(path, options, chunk_bytes=1000))
        self.assertEqual(sum(info.rows for info in meta.splits.values()), 71)

    def test_malformed_line_in_a_later_range_is_named_by_its_line_in_the_file(self):
        lines = _varied_lines(40)
        lines[33] = _line("0", ["x"])
        path = self.write_input(lines)
        with self.assertRaises(criteo.MalformedRecordError) as caught:
            criteo.convert([path], self.new_dir(), criteo.ConversionOptions(min_count=1, workers=1, chunk_bytes=500))
        self.assertEqual(caught.exception.line_number, 34)
        self.assertIn("%s:34: I1 must be an integer or empty, got 'x'" % path, str(caught.exception))

    def test_shards_are_balanced_to_the_row(self):
        path = self.write_input(_varied_lines(103))
        meta = criteo.convert([path], self.new_dir(), criteo.ConversionOptions(val_fraction=0.0, shards=4, min_count=1,
                                                                               workers=1, chunk_bytes=700))
        self.assertEqual(sorted(meta.splits["train"].shards.values()), [25, 26, 26, 26])

    def test_shuffle_keeps_every_row_in_a_new_order(self):
        path = self.generated_input(rows=2000, distinct=2000)
        options = dict(val_fraction=0.1, shards=3, min_count=2, workers=1, chunk_bytes=60_000)
        plain_dir = self.convert_again(path, options)
        plain = schema.DatasetMetadata.read(plain_dir)
        # A 1 MB budget makes buckets of about 128 KB: several per split.
        shuffled_dir = self.convert_again(path, options, shuffle=True, memory_mb=1)
        shuffled = schema.DatasetMetadata.read(shuffled_dir)
        self.assertIn("shuffled with seed 0", shuffled.source)
        self.assertEqual(shuffled.vocabulary, plain.vocabulary)
        for split in ("train", "validation"):
            self.assertEqual(shuffled.splits[split], plain.splits[split])
            self.assertEqual(_sorted_lines(shuffled_dir, shuffled, split), _sorted_lines(plain_dir, plain, split))
            text = dataset_io.read_split(shuffled_dir, shuffled, split, "libsvm")
            record = dataset_io.read_split(shuffled_dir, shuffled, split, "tfrecord")
            for got_text, got_record in zip(text, record):
                self.assertAllEqual(got_text, got_record)
        shard = "train/part-00000.libsvm"
        plain_tree, shuffled_tree = dataset_io.read_tree(plain_dir), dataset_io.read_tree(shuffled_dir)
        self.assertNotEqual(shuffled_tree[shard], plain_tree[shard])
        # Rows of the first input lines end up spread over the whole split.
        first_ids = {line.split(" ", 1)[1] for line in plain_tree[shard].decode().splitlines()[:30]}
        positions = [i for i, line in enumerate(shuffled_tree[shard].decode().splitlines())
                     if line.split(" ", 1)[1] in first_ids]
        self.assertGreater(max(positions), plain.splits["train"].shards["train/part-00000"] // 2)
        self.assertEqual(dataset_io.read_tree(self.convert_again(path, options, shuffle=True, memory_mb=1)),
                         shuffled_tree)
        self.assertNotEqual(dataset_io.read_tree(self.convert_again(path, options, shuffle=True, memory_mb=1,
                                                                    seed=1))[shard], shuffled_tree[shard])

    def test_negative_sampling_keeps_positives_and_records_the_rate(self):
        path = self.generated_input(rows=4000, distinct=0)
        options = dict(val_fraction=0.2, shards=2, min_count=2, workers=1)
        full = criteo.convert([path], self.new_dir(), criteo.ConversionOptions(**options))
        out = self.new_dir()
        sampled, report = criteo.convert_with_report([path], out, criteo.ConversionOptions(negative_sampling=0.25,
                                                                                           **options))
        self.assertEqual(criteo.recorded_negative_sampling(sampled), 0.25)
        self.assertEqual(criteo.recorded_negative_sampling(full), 1.0)
        self.assertEqual(sampled.vocabulary, full.vocabulary, "the vocabulary is counted before sampling")
        self.assertEqual(sampled.splits["validation"], full.splits["validation"])
        full_labels = dataset_io.read_split(self.convert_again(path, options), full, "train", "tfrecord")[0]
        labels = dataset_io.read_split(out, sampled, "train", "tfrecord")[0]
        self.assertEqual(labels.sum(), full_labels.sum(), "every positive is kept")
        negatives, kept = int((full_labels == 0).sum()), int((labels == 0).sum())
        self.assertEqual(report.dropped_negatives, negatives - kept)
        # Binomial(negatives, 0.25): 5 standard deviations either side.
        spread = 5 * np.sqrt(negatives * 0.25 * 0.75)
        self.assertBetween(kept, negatives * 0.25 - spread, negatives * 0.25 + spread)
        with self.assertRaisesRegex(ValueError, "negative_sampling must be in \\(0, 1\\], got 0"):
            criteo.convert([path], self.new_dir(), criteo.ConversionOptions(negative_sampling=0.0))

    def test_recalibrate_inverts_the_sampled_odds(self):
        rate = 0.1
        truth = np.array([0.001, 0.02, 0.3, 0.9])
        sampled = truth / (truth + (1 - truth) * rate)
        self.assertAllClose(criteo.recalibrate(sampled, rate), truth)
        self.assertAllClose(criteo.recalibrate(truth, 1.0), truth)

    def test_compact_and_fixed_libsvm_hold_the_same_rows(self):
        path = self.write_input(_varied_lines(50))
        options = dict(val_fraction=0.0, shards=1, min_count=1, workers=1)
        fixed = self.convert_again(path, options)
        compact = self.convert_again(path, options, libsvm_layout="compact")
        fixed_tree, compact_tree = dataset_io.read_tree(fixed), dataset_io.read_tree(compact)
        self.assertEqual(fixed_tree["train/part-00000.tfrecord"], compact_tree["train/part-00000.tfrecord"])
        fixed_lines = fixed_tree["train/part-00000.libsvm"].decode().splitlines()
        self.assertLen({len(line) for line in fixed_lines}, 1)
        self.assertLess(len(compact_tree["train/part-00000.libsvm"]), len(fixed_tree["train/part-00000.libsvm"]))
        for a, b in zip(dataset_io.read_libsvm(os.path.join(fixed, "train/part-00000.libsvm")),
                        dataset_io.read_libsvm(os.path.join(compact, "train/part-00000.libsvm"))):
            self.assertAllEqual(a, b)

    def test_parts_counted_apart_share_one_vocabulary(self):
        lines = _varied_lines(120)
        first, second = self.write_input(lines[:70]), self.write_input(lines[70:], name="day2.txt")
        whole = criteo.convert([first, second], self.new_dir(), criteo.ConversionOptions(val_fraction=0.2, min_count=3,
                                                                                         workers=1))
        counts = [self.new_dir(), self.new_dir()]
        criteo.count_part([first], counts[0], val_fraction=0.2, workers=1)
        summary_json = criteo.count_part([second], counts[1], val_fraction=0.2, workers=1, memory_mb=0.01)
        self.assertEqual(sum(summary_json["rows"].values()), 50)
        vocab_dir = self.new_dir()
        merged = criteo.merge_part_counts(counts, vocab_dir, min_count=3)
        self.assertEqual(merged.vocabulary, whole.vocabulary)
        part = criteo.convert([second], self.new_dir(), criteo.ConversionOptions(val_fraction=0.2, vocab=vocab_dir,
                                                                                 workers=1))
        self.assertEqual(part.vocabulary, whole.vocabulary)

    def test_real_rows_bounded_equals_in_memory(self):
        lines, source = _kaggle_lines(KAGGLE_ROWS_USED)
        if lines is None:
            self.skipTest("real Criteo rows not found at %s (set CRITEO_DATA_DIR)" % source)
        path = self.write_input(lines)
        options = dict(val_fraction=0.1, shards=2, min_count=2, workers=1)
        in_memory = self.convert_again(path, options)
        self.assertEqual(schema.DatasetMetadata.read(in_memory).vocabulary,
                         _reference_vocabulary(lines, 0.1, 2).fields)
        bounded = self.convert_again(path, options, memory_mb=0.02, chunk_bytes=40_000)
        self.assertEqual(dataset_io.read_tree(bounded), dataset_io.read_tree(in_memory))


class WorkersTest(CriteoTestCase, parameterized.TestCase):
    """Several worker processes write what one writes."""

    @pytest.mark.slow
    def test_two_workers_equal_one(self):
        path = self.generated_input(1200, 1200, seed=2)
        options = dict(val_fraction=0.1, shards=3, min_count=2, chunk_bytes=60_000, memory_mb=0.05)
        in_order = self.convert_per_workers(path, options)
        shuffled = self.convert_per_workers(path, options, shuffle=True)
        self.assertEqual(in_order[1], in_order[0])
        self.assertEqual(shuffled[1], shuffled[0])
        self.assertNotEqual(shuffled[0], in_order[0])

    @pytest.mark.slow
    def test_counts_handed_over_on_disk_are_not_spills(self):
        # Within the budget, two workers hand each chunk's counts over as runs on disk: the same output, no spill.
        path = self.generated_input(1200, 1200, seed=3)
        options = dict(val_fraction=0.1, shards=2, min_count=2, chunk_bytes=60_000, memory_mb=64)
        trees = self.convert_per_workers(path, options, spilled=False)
        self.assertEqual(trees[1], trees[0])

    @parameterized.parameters(True, False)
    def test_join_pieces_in_order(self, kernel_copy):
        out = self.new_dir()
        target = os.path.join(out, "part-00000.tfrecord")
        pieces = {".piece-%06d" % i: os.urandom(1000 + i) for i in range(3)}
        for suffix, data in pieces.items():
            with open(os.path.join(out, "part-00000" + suffix + ".tfrecord"), "wb") as f:
                f.write(data)
        with mock.patch.object(writing.os, "copy_file_range", create=True,
                               side_effect=None if kernel_copy else OSError(errno.EXDEV, "across devices"),
                               wraps=os.copy_file_range if kernel_copy else None):
            writing._join_pieces(writing._JoinTask(target, list(pieces)))
        with open(target, "rb") as f:
            self.assertEqual(f.read(), b"".join(pieces.values()))
        self.assertEqual(os.listdir(out), [os.path.basename(target)])

    def test_freed_memory_is_kept_for_reuse(self):
        # Page faults of allocating and freeing two 24 MB arrays 50 times, with and without.
        script = ("import resource, sys\n"
                  "import numpy as np\n"
                  "from dataprep import criteo\n"
                  "if sys.argv[1] == 'keep':\n"
                  "    criteo.keep_freed_memory()\n"
                  "before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
                  "for _ in range(50):\n"
                  "    a = np.ones(3 << 20)\n"
                  "    b = a + 1\n"
                  "    del a, b\n"
                  "print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)\n")
        faults = {}
        for mode in ("keep", "default"):
            result = command_line.run(["python", "-c", script, mode], self.get_temp_dir(), timeout=60)
            self.assertEqual(0, result.returncode, command_line.describe(mode, result))
            faults[mode] = int(result.stdout)
        self.assertLess(faults["keep"] * 10, faults["default"], faults)


class CommandLineTest(CriteoTestCase):

    def test_the_option_flags_are_the_options_fields_with_their_defaults(self):
        flag_values = flags.FlagValues()
        command.define_flags(flag_values)
        defaults = criteo.ConversionOptions()
        names = [field.name for field in config_flags.flag_fields(criteo.ConversionOptions)]
        self.assertLen(names, 13)
        for name in names:
            self.assertEqual(getattr(defaults, name), flag_values[name].default, name)
        self.assertNotIn("chunk_bytes", flag_values)
        flag_values(["prog", "--output_dir", "x", "--shards", "3", "--shuffle", "--libsvm_layout", "compact"])
        self.assertEqual(dataclasses.replace(defaults, shards=3, shuffle=True, libsvm_layout="compact"),
                         command.options_from_flags(flag_values))

    def test_cli_converts_files_and_refuses_to_overwrite(self):
        first = self.write_input(_varied_lines(6))
        second = self.write_input(_varied_lines(4, seed=1), name="day2.txt")
        cwd = self.new_dir()
        command = command_line.python_module(
            "dataprep.criteo", "--output_dir", "data/criteo", "--val_fraction", "0", "--shards", "1",
            "--min_count", "1", "--workers", "2", "--memory_mb", "64", "--shuffle", "--negative_sampling", "0.5",
            "--input", os.path.relpath(first, cwd), os.path.relpath(second, cwd))
        result = command_line.run(command, cwd, timeout=120)
        self.assertEqual(result.returncode, 0, command_line.describe(command, result))
        meta = schema.DatasetMetadata.read(os.path.join(cwd, "data/criteo"))
        self.assertRegex(result.stdout, r"train\s+%d rows in 1 shards" % meta.splits["train"].rows)
        self.assertRegex(result.stdout, r"count .* MB/s")
        # The timings once: the summary's, not the library's INFO lines of them as well.
        self.assertLen(re.findall(r"\btotal +[\d.]+s ", result.stdout + result.stderr), 1,
                       result.stdout + result.stderr)
        self.assertIn("on 2 worker(s)", result.stdout)
        self.assertEqual(criteo.recorded_negative_sampling(meta), 0.5)
        self.assertBetween(meta.splits["train"].rows, 1, 10)

        again = command_line.run(command, cwd, timeout=120)
        self.assertNotEqual(again.returncode, 0)
        self.assertIn("--overwrite", again.stderr)


class KaggleRowsTest(CriteoTestCase):

    def test_first_kaggle_rows(self):
        source = os.path.join(paths.CRITEO_DIR, KAGGLE_HEAD_FILE)
        if not os.path.isfile(source):
            self.skipTest("real Criteo rows not found at %s (set CRITEO_DATA_DIR)" % source)
        with open(source) as f:
            lines = [next(f).rstrip("\n") for _ in range(KAGGLE_ROWS_USED)]
        expected_positives = sum(line.split("\t")[0] == "1" for line in lines)
        out = self.new_dir()
        meta = criteo.convert([self.write_input(lines)], out, criteo.ConversionOptions(val_fraction=0.1, shards=2,
                                                                                       min_count=2))

        self.assertEqual(_bad_records(meta), 0)
        self.assertEqual(sum(info.rows for info in meta.splits.values()), KAGGLE_ROWS_USED)
        positives = 0
        for info in meta.splits.values():
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
