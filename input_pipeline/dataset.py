"""A dataset as a training run sees it: its files, and what its `metadata.json` says.

    data = Dataset.open("data/synthetic")        # a dataset root: its train/ and validation/ files
    data = Dataset.open(["data/a/train", "data/b/train"], val=[])   # no validation

The specs are files, globs or directories, as `--train_data` and
`--val_data` take them (`input_pipeline.files.resolve`). The metadata of the
first dataset root among the training specs (`schema.find_metadata`) gives
the feature and field sizes and the rows of each file; it is read once, here,
and handed down: the trainer gives the input pipelines the rows and the
metadata (`row_counts`, `DatasetBuilder(row_counts=..., metadata=...)`)
instead of each looking them up again.
"""

import dataclasses
import os
from typing import Any, Dict, Optional, Sequence, Tuple, Union

from input_pipeline import files, format_base, formats, schema

Spec = Union[str, Sequence[str]]


@dataclasses.dataclass(frozen=True)
class Dataset:
    """Resolved training and validation files, and their dataset's metadata.

    Attributes:
      train_files: the training files.
      val_files: the validation files (empty: no validation).
      data_format: their `format_base.DataFormat`.
      metadata: the `schema.DatasetMetadata` of the training data's dataset
        root, or None for files outside one.
      metadata_dir: the folder of that metadata file, whose shards it lists
        relative to it; None without metadata.
    """

    train_files: Tuple[str, ...]
    val_files: Tuple[str, ...] = ()
    data_format: format_base.DataFormat = formats.TFRECORD
    metadata: Optional[schema.DatasetMetadata] = None
    metadata_dir: Optional[str] = None

    @classmethod
    def open(cls, train: Spec, val: Optional[Spec] = None,
             data_format: formats.DataFormatLike = formats.TFRECORD) -> "Dataset":
        """Resolves `train` and `val` and reads the metadata.

        Args:
          train: training files, globs or directories; a dataset root means
            its `train/` files. Empty: none (Pipe mode, where the training
            data arrives on a channel); the metadata then comes from `val`.
          val: validation specs; None: the `validation/` files of the dataset
            roots among `train`; an empty list: none.
          data_format: the files' format (or its name).

        Raises:
          ValueError: a spec matches no file of the format, or a metadata
            file is not valid; the message names it.
        """
        data_format = formats.as_format(data_format)
        train_specs = [train] if isinstance(train, str) else list(train)
        val_specs = [] if val is None else [val] if isinstance(val, str) else list(val)
        train_files = tuple(files.resolve(train_specs, data_format, split=schema.TRAIN_SPLIT)) if train_specs else ()
        if val is None:
            val_files = tuple(files.default_validation(train_specs, data_format))
        else:
            val_files = tuple(files.resolve(val_specs, data_format, split=schema.VALIDATION_SPLIT)) if val_specs else ()
        path = find_metadata_file(train_specs or val_specs)
        metadata = schema.load_metadata(path) if path else None
        return cls(train_files, val_files, data_format, metadata, os.path.dirname(path) if path else None)

    def row_counts(self, paths: Sequence[str]) -> Optional[Dict[str, int]]:
        """The rows of each of `paths` from the metadata read at `open`; None unless it lists every one.

        Nothing is read again: the input pipelines take these counts
        (`DatasetBuilder(row_counts=...)`) instead of looking them up.
        """
        if self.metadata is None or self.metadata_dir is None or not paths:
            return None
        table = self.metadata.rows_per_file(self.metadata_dir, self.data_format.extension)
        rows = {path: table.get(os.path.abspath(path)) for path in paths}
        if any(count is None for count in rows.values()):
            return None
        return {path: count for path, count in rows.items() if count is not None}

    def pipeline_args(self, paths: Sequence[str]) -> Dict[str, Any]:
        """What a `DatasetBuilder` of `paths` takes from here: `row_counts` and `metadata`; {} unless listed."""
        rows = self.row_counts(paths)
        return {} if rows is None else {"row_counts": rows, "metadata": self.metadata}

    @property
    def feature_size(self) -> int:
        """Distinct feature ids, from the metadata.

        Raises:
          ValueError: the files have no metadata (give the size yourself).
        """
        if self.metadata is None:
            raise ValueError("--feature_size is required: no metadata.json was found beside %s"
                             % (", ".join(self.train_files[:3]) or "the training data"))
        return self.metadata.feature_size

    @property
    def field_size(self) -> int:
        """Ids per example: from the metadata, else the Criteo schema's 39."""
        return self.metadata.field_size if self.metadata is not None else schema.FIELD_SIZE


def find_metadata_file(specs: Sequence[str]) -> Optional[str]:
    """The metadata file of the first dataset root (or split folder) holding one of `specs`, or None."""
    for item in specs:
        path = schema.find_metadata(item)
        if path:
            return path
    return None


def find_metadata(specs: Sequence[str]) -> Optional[schema.DatasetMetadata]:
    """The metadata of the first dataset root holding one of `specs`, or None."""
    path = find_metadata_file(specs)
    return schema.load_metadata(path) if path else None
