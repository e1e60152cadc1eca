"""Tests for input_pipeline.files: spec resolution and row counts."""

import os
import shutil
import tempfile

import tensorflow as tf
from absl.testing import parameterized

from input_pipeline import files, schema
from tests.input_pipeline import example_files


class FilesTestCase(tf.test.TestCase, parameterized.TestCase):

    def setUp(self):
        super().setUp()
        self.dir = tempfile.mkdtemp(dir=self.get_temp_dir())
        self.root = os.path.join(self.dir, "root")
        rows = [example_files.make_rows(n, seed=n) for n in (3, 5)]
        self.metadata = example_files.write_dataset_root(
            self.root, {"train": rows, "validation": [example_files.make_rows(2)]})
        self.loose = os.path.join(self.dir, "loose")
        os.makedirs(self.loose)
        for name in ("b.tfrecord", "a.tfrecord"):
            example_files.write_tfrecord(os.path.join(self.loose, name), example_files.make_rows(4))
        example_files.write_libsvm(os.path.join(self.loose, "c.libsvm"), example_files.make_rows(4))
        example_files.write_tfrecord(os.path.join(self.loose, ".partial.tfrecord"), example_files.make_rows(1))

    def path(self, *parts):
        return os.path.join(self.dir, *parts)


class ResolveTest(FilesTestCase):

    def test_dataset_root_means_its_split(self):
        for split, count in (("train", 2), ("validation", 1)):
            resolved = files.resolve([self.root], "libsvm", split)
            self.assertLen(resolved, count)
            for path in resolved:
                self.assertEqual(os.path.dirname(path), self.path("root", split))
                self.assertTrue(path.endswith(".libsvm"))

    def test_directory_means_files_with_the_extension(self):
        self.assertEqual(files.resolve([self.loose], "tfrecord"),
                         [self.path("loose", "a.tfrecord"), self.path("loose", "b.tfrecord")])
        self.assertEqual(files.resolve(self.loose, "libsvm"), [self.path("loose", "c.libsvm")])

    def test_glob_file_and_dedup_sorted(self):
        spec = [self.path("loose", "b.tfrecord"), self.path("loose", "*.tfrecord"),
                os.path.relpath(self.path("loose", "a.tfrecord"))]
        self.assertEqual(files.resolve(spec, "tfrecord"),
                         [self.path("loose", "a.tfrecord"), self.path("loose", "b.tfrecord")])

    def test_explicit_file_of_any_extension(self):
        self.assertEqual(files.resolve([self.path("loose", "c.libsvm")], "tfrecord"),
                         [self.path("loose", "c.libsvm")])

    def test_glob_matching_directories_expands_them(self):
        resolved = files.resolve([self.path("ro*")], "tfrecord")
        self.assertLen(resolved, 2)
        self.assertTrue(all("/root/train/" in path for path in resolved))

    @parameterized.named_parameters(
        ("missing", ["nope.tfrecord"], "'.*nope.tfrecord' matches no tfrecord file \\(no such file"),
        ("glob", ["loose/*.parquet"], "'.*loose/\\*.parquet' matches no tfrecord file \\(the glob"),
        ("split", ["root"], "'.*root' matches no tfrecord file \\(it is a dataset root; its test/"),
    )
    def test_nothing_matched_names_the_item(self, spec, message):
        with self.assertRaisesRegex(ValueError, message):
            files.resolve([self.path(item) for item in spec], "tfrecord", split="test")

    def test_directory_without_matches(self):
        empty = tempfile.mkdtemp(dir=self.get_temp_dir())
        with self.assertRaisesRegex(ValueError, "matches no libsvm file \\(a directory without"):
            files.resolve([empty], "libsvm")

    def test_files_of_other_formats_are_named_with_their_flags(self):
        directory = tempfile.mkdtemp(dir=self.get_temp_dir())
        example_files.write_rows(os.path.join(directory, "part"), example_files.make_rows(3), "tfrecord")
        with self.assertRaisesRegex(ValueError, "matches no tfrecord_packed file \\(a directory without files of "
                                                "that extension\\); it holds tfrecord files: pass --data_format "
                                                "tfrecord, or convert them \\(python -m dataprep.libsvm_to_tfrecord"):
            files.resolve([directory], "tfrecord_packed")

    def test_empty_file_is_refused(self):
        empty = self.path("loose", "zero.tfrecord")
        open(empty, "w").close()
        with self.assertRaisesRegex(ValueError, "zero.tfrecord \\(from spec item .*loose'\\) is empty \\(0 bytes\\)"):
            files.resolve([self.loose], "tfrecord")

    def test_empty_spec_and_bad_format(self):
        with self.assertRaisesRegex(ValueError, "names no files"):
            files.resolve([], "tfrecord")
        with self.assertRaisesRegex(ValueError,
                                    "data_format must be one of tfrecord, tfrecord_packed, libsvm, got 'csv'"):
            files.resolve([self.loose], "csv")


class ValidationTest(FilesTestCase):

    def test_root_gives_its_validation_files(self):
        self.assertEqual(files.default_validation([self.root], "tfrecord"),
                         [self.path("root", "validation", "part-00000.tfrecord")])

    def test_other_specs_give_none(self):
        self.assertEqual(files.default_validation([self.loose], "tfrecord"), [])
        self.assertEqual(files.default_validation([self.root, self.loose], "tfrecord"), [])


class RowCountsTest(FilesTestCase):

    def test_from_metadata(self):
        paths = files.resolve([self.root], "tfrecord")
        self.assertEqual(files.row_counts(paths, "tfrecord"), dict(zip(paths, [3, 5])))

    def test_unknown_without_metadata(self):
        paths = files.resolve([self.root], "tfrecord") + [self.path("loose", "a.tfrecord")]
        self.assertIsNone(files.row_counts(paths, "tfrecord"))

    @parameterized.parameters("tfrecord", "tfrecord_packed", "libsvm")
    def test_count_rows_reads_the_files(self, data_format):
        paths = files.resolve([self.root], data_format)
        self.assertEqual(files.count_rows(paths, data_format), dict(zip(paths, [3, 5])))


class SplitFolderTest(FilesTestCase):
    """A dataset written with split views: each split folder holds its own metadata.json."""

    def setUp(self):
        super().setUp()
        self.metadata.write(self.root, split_views=True)
        # A split folder on its own, as a SageMaker channel holds it.
        self.channel = self.path("channel", "train")
        shutil.copytree(self.path("root", "train"), self.channel)

    def test_each_split_folder_holds_its_view(self):
        for split, rows, stems in (("train", 8, ["part-00000", "part-00001"]), ("validation", 2, ["part-00000"])):
            view = schema.DatasetMetadata.read(self.path("root", split))
            self.assertEqual(split, view.split)
            self.assertEqual(self.metadata.feature_size, view.feature_size)
            self.assertEqual([split], list(view.splits))
            self.assertEqual(rows, view.splits[split].rows)
            self.assertEqual(stems, sorted(view.splits[split].shards))
            self.assertEqual({}, view.vocabulary)

    def test_a_split_folder_is_not_a_dataset_root(self):
        self.assertTrue(files.is_dataset_root(self.root))
        for directory in (self.path("root", "train"), self.channel):
            self.assertFalse(files.is_dataset_root(directory))

    def test_a_split_folder_alone_resolves_to_its_files_with_their_row_counts(self):
        paths = files.resolve([self.channel], "tfrecord")
        self.assertEqual([os.path.join(self.channel, "part-0000%d.tfrecord" % i) for i in (0, 1)], paths)
        self.assertEqual(dict(zip(paths, [3, 5])), files.row_counts(paths, "tfrecord"))
        self.assertEqual(os.path.join(self.channel, schema.METADATA_FILE), schema.find_metadata(self.channel))
        self.assertEqual([], files.default_validation([self.channel], "tfrecord"))

    def test_the_root_still_means_its_splits_and_counts(self):
        paths = files.resolve([self.root], "tfrecord")
        self.assertEqual(dict(zip(paths, [3, 5])), files.row_counts(paths, "tfrecord"))
        self.assertEqual([self.path("root", "validation", "part-00000.tfrecord")],
                         files.default_validation([self.root], "tfrecord"))

    def test_a_view_needs_its_shards_inside_the_split_folder(self):
        odd = schema.DatasetMetadata(feature_size=10, splits={"train": schema.SplitInfo(1, {"elsewhere/x": 1})})
        with self.assertRaisesRegex(ValueError, "split 'train' has shards outside its folder: elsewhere/x"):
            odd.split_view("train")
        with self.assertRaisesRegex(ValueError, "no split 'test'"):
            odd.split_view("test")


if __name__ == "__main__":
    tf.test.main()
