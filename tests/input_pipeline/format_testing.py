"""What the tests of the data formats share: a small config, a read-and-decode helper, a test case that writes rows."""

import os

import tensorflow as tf
from absl.testing import parameterized

from input_pipeline import format_base, pipeline
from tests.input_pipeline import example_files

FIELDS = example_files.SMALL_FIELD_SIZE
ROWS = 5


def config(data_format, **kwargs) -> pipeline.PipelineConfig:
    return pipeline.PipelineConfig(data_format=data_format, field_size=FIELDS, **kwargs)


def decoded(data_format: format_base.DataFormat, paths, labelled=True):
    """Every batch of `paths` read and decoded by the format, batches of 2 rows."""
    read_config = config(data_format, num_parallel_reads=1)

    def decode(*batch):
        return data_format.decode_batch(batch, read_config, file_names=paths, labelled=labelled)

    return list(data_format.records(paths, read_config).batch(2).map(decode))


class FormatTestCase(tf.test.TestCase, parameterized.TestCase):
    """A temporary directory and `ROWS` rows (`self.rows`) to write in any format."""

    def setUp(self):
        super().setUp()
        self.dir = self.create_tempdir().full_path
        self.rows = example_files.make_rows(ROWS)

    def write(self, data_format: format_base.DataFormat, stem: str = "part") -> str:
        """`self.rows` in `data_format`, encoded by the library's writers."""
        path = os.path.join(self.dir, stem + data_format.extension)
        with open(path, "wb") as f:
            f.write(data_format.encode(*self.rows))
        return path
