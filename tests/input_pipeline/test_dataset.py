"""`input_pipeline.dataset.Dataset`: the files of a spec, and its metadata read once and handed to the pipelines."""

import os
from unittest import mock

import tensorflow as tf

from input_pipeline import files, formats, pipeline, schema
from input_pipeline.dataset import Dataset
from tests.input_pipeline import example_files

BATCH = 4
SHARD_ROWS = ((10, 6), (5,))


class MetadataReads:
    """Records the metadata files parsed (`paths`) and looked up (`lookups`, cached or not), the cache emptied first."""

    def __init__(self):
        self.paths = []
        self.lookups = []
        self._patches = []

    def __enter__(self):
        schema._load_metadata.cache_clear()
        read, load = schema.DatasetMetadata.read.__func__, schema.load_metadata

        def counting_read(cls, path):
            self.paths.append(path)
            return read(cls, path)

        def counting_load(path):
            self.lookups.append(path)
            return load(path)

        self._patches = [mock.patch.object(schema.DatasetMetadata, "read", classmethod(counting_read)),
                         mock.patch.object(schema, "load_metadata", counting_load)]
        for patch in self._patches:
            patch.start()
        return self

    def __exit__(self, *exc_info):
        for patch in self._patches:
            patch.stop()
        schema._load_metadata.cache_clear()


class DatasetTest(tf.test.TestCase):

    def setUp(self):
        super().setUp()
        self.root = self.create_tempdir().full_path
        self.metadata = example_files.write_dataset_root(self.root, {
            split: [example_files.make_rows(rows, seed=i) for i, rows in enumerate(shards)]
            for split, shards in zip((schema.TRAIN_SPLIT, schema.VALIDATION_SPLIT), SHARD_ROWS)})
        self.config = pipeline.PipelineConfig(field_size=example_files.SMALL_FIELD_SIZE)

    def test_a_dataset_root_gives_its_files_sizes_and_rows(self):
        data = Dataset.open(self.root)
        self.assertEqual(tuple(files.resolve([self.root], formats.TFRECORD)), data.train_files)
        self.assertLen(data.val_files, 1)
        self.assertEqual((example_files.MAX_ID, example_files.SMALL_FIELD_SIZE), (data.feature_size, data.field_size))
        # The rows the split folders' own metadata lists, from the root's metadata alone.
        for paths in (data.train_files, data.val_files):
            self.assertEqual(files.row_counts(paths, formats.TFRECORD), data.row_counts(paths))
        self.assertEqual(sum(SHARD_ROWS[0]), sum(data.row_counts(data.train_files).values()))

    def test_files_the_metadata_does_not_list_have_no_rows_from_it(self):
        outside = example_files.write_tfrecord(os.path.join(self.create_tempdir().full_path, "x.tfrecord"),
                                               example_files.make_rows(3))
        data = Dataset.open(self.root)
        self.assertIsNone(data.row_counts(data.train_files + (outside,)))
        self.assertEqual({}, data.pipeline_args([outside]))
        self.assertIsNone(Dataset.open([outside], val=[]).row_counts([outside]))

    def test_the_metadata_is_read_once_and_handed_to_every_pipeline(self):
        with MetadataReads() as reads:
            data = Dataset.open(self.root)
            for paths in (data.train_files, data.val_files):
                builder = pipeline.DatasetBuilder(paths, self.config, batch_size=BATCH, **data.pipeline_args(paths))
                self.assertEqual(sum(data.row_counts(paths).values()) // BATCH, builder.steps_per_epoch())
        self.assertEqual([os.path.realpath(os.path.join(self.root, schema.METADATA_FILE))], reads.paths)
        self.assertLen(reads.lookups, 1)
        # Without it, each pipeline looks the metadata up again (for its rows, then its field size).
        with MetadataReads() as reads:
            for paths in (data.train_files, data.val_files):
                pipeline.DatasetBuilder(paths, self.config, batch_size=BATCH)
        self.assertLen(reads.lookups, 4)

    def test_the_handed_metadata_still_checks_the_field_size(self):
        data = Dataset.open(self.root)
        with self.assertRaisesRegex(ValueError, "says field_size=%d, the pipeline is configured with field_size=7"
                                    % example_files.SMALL_FIELD_SIZE):
            pipeline.DatasetBuilder(data.train_files, pipeline.PipelineConfig(field_size=7), batch_size=BATCH,
                                    **data.pipeline_args(data.train_files))


if __name__ == "__main__":
    tf.test.main()
