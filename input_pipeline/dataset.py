"""A dataset as a training run sees it: its files, and what its `metadata.json` says.

    data = Dataset.open("data/synthetic")        # a dataset root: its train/ and validation/ files
    data = Dataset.open(["data/a/train", "data/b/train"], val=[])   # no validation

The specs are files, globs or directories, as `--train_data` and
`--val_data` take them (`input_pipeline.files.resolve`). The metadata of the
first dataset root among the training specs (`schema.find_metadata`) gives
the feature and field sizes; it is read once (`schema.load_metadata`).
"""

import dataclasses
from typing import Optional, Sequence, Tuple, Union

from input_pipeline import files, formats, schema

Spec = Union[str, Sequence[str]]


@dataclasses.dataclass(frozen=True)
class Dataset:
    """Resolved training and validation files, and their dataset's metadata.

    Attributes:
      train_files: the training files.
      val_files: the validation files (empty: no validation).
      data_format: their `formats.DataFormat`.
      metadata: the `schema.DatasetMetadata` of the training data's dataset
        root, or None for files outside one.
    """

    train_files: Tuple[str, ...]
    val_files: Tuple[str, ...] = ()
    data_format: formats.DataFormat = formats.TFRECORD
    metadata: Optional[schema.DatasetMetadata] = None

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
        return cls(train_files, val_files, data_format, find_metadata(train_specs or val_specs))

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


def find_metadata(specs: Sequence[str]) -> Optional[schema.DatasetMetadata]:
    """The metadata of the first dataset root holding one of `specs`, or None."""
    for item in specs:
        path = schema.find_metadata(item)
        if path:
            return schema.load_metadata(path)
    return None
