"""Tests for input_pipeline.format_tfrecord_packed: records of up to `PACKED_ROWS_PER_RECORD` rows."""

import os

import numpy as np
import tensorflow as tf

from input_pipeline import format_tfrecord_packed, formats, schema
from tests.input_pipeline import example_files
from tests.input_pipeline.format_testing import decoded

ROWS = format_tfrecord_packed.PACKED_ROWS_PER_RECORD + 1


class PackedTFRecordTest(tf.test.TestCase):

    def test_a_record_holds_up_to_packed_rows_per_record(self):
        rows = example_files.make_rows(ROWS)
        path = os.path.join(self.create_tempdir().full_path, "part" + formats.TFRECORD_PACKED.extension)
        with open(path, "wb") as f:
            f.write(formats.TFRECORD_PACKED.encode(*rows))
        self.assertTrue(formats.TFRECORD_PACKED.packed)
        self.assertEqual(formats.TFRECORD.count_rows(path), 2)  # records
        self.assertEqual(formats.TFRECORD_PACKED.count_rows(path), ROWS)
        batches = decoded(formats.TFRECORD_PACKED, [path])
        self.assertAllEqual(np.concatenate([features[schema.FEAT_IDS] for features, _ in batches]), rows[1])


if __name__ == "__main__":
    tf.test.main()
