"""What a data format reads of the pipeline's configuration: `ReadOptions`.

`input_pipeline.pipeline.PipelineConfig` has these fields; the formats
(`input_pipeline.formats`), which sit below the pipeline, read them through
this protocol and never import the pipeline. This module never imports
TensorFlow.
"""

from typing import Protocol


class ReadOptions(Protocol):
    """The options a format reads: fields of `input_pipeline.pipeline.PipelineConfig`."""

    @property
    def field_size(self) -> int:
        """Ids per example."""

    @property
    def num_parallel_reads(self) -> int:
        """Files read at once (`tf.data.AUTOTUNE`: `input_pipeline.format_base.DEFAULT_PARALLEL_READS`)."""

    @property
    def read_buffer_bytes(self) -> int:
        """Read buffer of each open file."""

    @property
    def skip_bad_records(self) -> bool:
        """LibSVM's option: drop bad lines instead of failing."""

    @property
    def max_corrupted_records(self) -> int:
        """TFRecord's option: corrupt or truncated files skipped per pass before failing."""
