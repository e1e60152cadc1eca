"""The on-disk layout of a DeepFM dataset root and its `metadata.json`.

A dataset root, as written by `dataprep.criteo` and
`dataprep.synthetic`, looks like::

    DIR/metadata.json
    DIR/train/metadata.json   DIR/train/part-00000.tfrecord   DIR/train/part-00000.libsvm   ...
    DIR/validation/metadata.json   DIR/validation/part-00000.tfrecord   ...

Each split folder holds its own `metadata.json` (`DatasetMetadata.split_view`:
the dataset's sizes, that split's shards relative to the folder, no
vocabulary), so that a split folder used on its own (a SageMaker channel
pointing at `train/` or `validation/`) still has its sizes and row counts.
A dataset root is told from a split folder by its split folders
(`is_dataset_root`). Datasets written before split folders had their own
metadata keep working: a split folder without one uses its root's.

Both formats hold the same rows in the layout of the classic tf.estimator
DeepFM and of the Amazon SageMaker DeepFM sample:

* LibSVM: one line per example, `label id:val id:val ...` with exactly
  `field_size` pairs.
* TFRecord: one `tf.train.Example` per example with the features `label`
  (float32 scalar), `ids` (int64 [field_size]) and `values`
  (float32 [field_size]).

Ids 1..13 are the 13 integer fields; the 26 categorical fields follow, each
with its own offset, vocabulary and unknown id. Id 0 is never used.
"""

import dataclasses
import functools
import json
import os
from typing import Dict, List, Optional

NUM_DENSE_FIELDS = 13
NUM_CATEGORICAL_FIELDS = 26
FIELD_SIZE = NUM_DENSE_FIELDS + NUM_CATEGORICAL_FIELDS
FIRST_DENSE_ID = 1

# TFRecord feature keys (the SageMaker DeepFM sample's names).
LABEL_KEY = "label"
IDS_KEY = "ids"
VALUES_KEY = "values"

# Keys of the features dict a pipeline yields and the model reads; they are
# also the names of the serving signature's inputs.
FEAT_IDS = "feat_ids"
FEAT_VALS = "feat_vals"

METADATA_FILE = "metadata.json"
TRAIN_SPLIT = "train"
VALIDATION_SPLIT = "validation"
SPLITS = (TRAIN_SPLIT, VALIDATION_SPLIT)
SHARD_STEM = "part-%05d"


def shard_stem(index: int) -> str:
    """The file name of shard `index` without its format's extension (`part-00003`)."""
    return SHARD_STEM % index


@dataclasses.dataclass
class SplitInfo:
    """Rows of one split, in total and per shard (shard paths are relative).

    Attributes:
      rows: number of examples in the split.
      shards: shard file stem (e.g. `train/part-00000`) -> rows in that shard.
        The same stem with the extension of any format holds the same rows.
    """

    rows: int = 0
    shards: Dict[str, int] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class DatasetMetadata:
    """The content of `metadata.json`.

    Attributes:
      feature_size: number of distinct feature ids (largest id + 1).
      field_size: ids per example (39 for Criteo).
      splits: split name -> `SplitInfo`.
      vocabulary: per categorical field (`C1`..`C26`), the offset of its first
        id, its unknown id, and its value -> id map. Empty for synthetic data.
      dense_clip: per integer field, the clip value its raw value is divided by.
      planted_auc: for synthetic data, the AUC of the planted model on the
        validation split: the best a trained model can reach.
      source: free-form description of where the rows came from.
      split: set in the copy a split folder holds (`split_view`): the split
        it describes; its shard stems are then relative to that folder, and
        it has no vocabulary (the dataset root's metadata has it).
    """

    feature_size: int
    field_size: int = FIELD_SIZE
    splits: Dict[str, SplitInfo] = dataclasses.field(default_factory=dict)
    vocabulary: Dict[str, dict] = dataclasses.field(default_factory=dict)
    dense_clip: List[float] = dataclasses.field(default_factory=list)
    planted_auc: Optional[float] = None
    source: str = ""
    split: Optional[str] = None

    def to_json(self) -> str:
        # Field by field rather than `dataclasses.asdict`, which deep-copies the vocabulary first.
        fields = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}
        fields["splits"] = {name: dataclasses.asdict(info) for name, info in self.splits.items()}
        return json.dumps(fields, indent=1, sort_keys=True)

    def write(self, root: str, split_views: bool = False) -> str:
        """Writes `root/metadata.json` atomically and returns its path.

        Args:
          root: the directory.
          split_views: also write each split's `split_view` as
            `root/<split>/metadata.json` (what a dataset root holds; the
            split folder is created if missing).
        """
        if split_views:
            for name in self.splits:
                directory = os.path.join(root, name)
                os.makedirs(directory, exist_ok=True)
                self.split_view(name).write(directory)
        path = os.path.join(root, METADATA_FILE)
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write(self.to_json())
        os.replace(tmp, path)
        return path

    def split_view(self, split: str) -> "DatasetMetadata":
        """The metadata the folder of `split` holds: its shards relative to the folder, no vocabulary.

        Raises:
          ValueError: no such split, or a shard stem outside the split's folder.
        """
        if split not in self.splits:
            raise ValueError("no split %r in the metadata (it has %s)" % (split, ", ".join(sorted(self.splits))))
        prefix = split + "/"
        info = self.splits[split]
        outside = [stem for stem in info.shards if not stem.startswith(prefix)]
        if outside:
            raise ValueError("split %r has shards outside its folder: %s" % (split, ", ".join(outside[:3])))
        shards = {stem[len(prefix):]: rows for stem, rows in info.shards.items()}
        return dataclasses.replace(self, splits={split: SplitInfo(rows=info.rows, shards=shards)}, vocabulary={},
                                   split=split)

    @classmethod
    def read(cls, path: str) -> "DatasetMetadata":
        """Reads a metadata file, or `metadata.json` inside a directory.

        Raises:
          FileNotFoundError: no metadata file at `path`.
          ValueError: the file is not valid metadata; the message names it.
        """
        if os.path.isdir(path):
            path = os.path.join(path, METADATA_FILE)
        with open(path) as f:
            try:
                raw = json.load(f)
            except json.JSONDecodeError as e:
                raise ValueError("%s is not valid JSON: %s" % (path, e)) from e
        try:
            raw["splits"] = {
                name: SplitInfo(**info) for name, info in raw.get("splits", {}).items()
            }
            return cls(**raw)
        except TypeError as e:
            raise ValueError("%s is not a dataset metadata file: %s" % (path, e)) from e

    def rows_per_file(self, root: str, extension: str) -> Dict[str, int]:
        """Maps each shard file's absolute path with `extension` (a format's) to its rows."""
        return {
            os.path.abspath(os.path.join(root, stem + extension)): rows
            for split in self.splits.values()
            for stem, rows in split.shards.items()
        }


def load_metadata(path: str) -> DatasetMetadata:
    """The metadata file at `path`, read once per process while it is unchanged.

    A training run looks its dataset's metadata up several times (the entry
    point, the row counts of each pipeline, their field-size checks); a
    Criteo-scale vocabulary makes each read costly. Callers share the object
    and must not change it.

    Raises:
      FileNotFoundError, ValueError: as `DatasetMetadata.read`.
    """
    stat = os.stat(path)
    return _load_metadata(os.path.realpath(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=8)
def _load_metadata(path: str, mtime_ns: int, size: int) -> DatasetMetadata:
    del mtime_ns, size  # The cache key: a rewritten file is read again.
    return DatasetMetadata.read(path)


def find_metadata(path: str) -> Optional[str]:
    """Returns the nearest metadata file describing `path`, if any.

    `path` may be a dataset root, a split folder (inside a dataset root or on
    its own, e.g. a SageMaker channel), or a file inside a split folder. A
    split folder's own metadata (`DatasetMetadata.split_view`) comes before
    its root's.
    """
    candidate = os.path.abspath(path)
    if not os.path.isdir(candidate):
        candidate = os.path.dirname(candidate)
    for _ in range(2):
        meta = os.path.join(candidate, METADATA_FILE)
        if os.path.isfile(meta):
            return meta
        candidate = os.path.dirname(candidate)
    return None


def is_dataset_root(path: str) -> bool:
    """Whether `path` is a dataset root: a directory with `metadata.json` and a split folder.

    A split folder holding its own `metadata.json` has no split folders in
    it, so it is not a root.
    """
    return (os.path.isfile(os.path.join(path, METADATA_FILE))
            and any(os.path.isdir(os.path.join(path, split)) for split in SPLITS))
