"""The categorical fields' vocabulary: each value's id, per field, as `metadata.json` stores it.

Each field C1..C26 owns a block of ids, from `FIRST_CATEGORICAL_ID` up: its
unknown id (the block's first id, `offset`), then one id per kept value,
most frequent first (ties in byte order). A value is kept when it occurs at
least `min_count` times in the rows the vocabulary is counted on (every row
of the train split, before negative sampling); rarer and unseen values map
to the unknown id. An empty field is a value of its own (the key `""`), so
"missing" stays distinguishable from "rare".
"""

from typing import Dict, List, Sequence, Tuple

import numpy as np

from dataprep import vocab as vocab_lib
from dataprep.criteo.records import CATEGORICAL_NAMES, FIRST_CATEGORICAL_ID
from input_pipeline import schema


class Vocabulary:
    """Per categorical field: offset, unknown id and value -> id map.

    Stored in `DatasetMetadata.vocabulary` as
    `{"C1": {"offset": 14, "unknown_id": 14, "values": {"05db9164": 15, ...}}, ...}`.
    """

    def __init__(self, fields: Dict[str, dict]):
        self.fields = fields
        self._maps = [fields[name]["values"] for name in CATEGORICAL_NAMES]
        self._unknown = [fields[name]["unknown_id"] for name in CATEGORICAL_NAMES]

    @classmethod
    def build(cls, counts: Sequence[Dict[str, int]], min_count: int) -> "Vocabulary":
        """Keeps, per field, the values seen at least `min_count` times (all counts in memory).

        Args:
          counts: per categorical field, value -> occurrences.
          min_count: the frequency cutoff, >= 1.

        Returns:
          The vocabulary with ids from `FIRST_CATEGORICAL_ID` upwards, most
          frequent value first, ties in byte order.
        """
        return cls.from_ranked([sorted((value for value, count in field_counts.items() if count >= min_count),
                                       key=lambda value: (-field_counts[value], value.encode()))
                                for field_counts in counts])

    @classmethod
    def from_ranked(cls, ranked: Sequence[Sequence[str]]) -> "Vocabulary":
        """Gives ids to kept values, per field in the order given."""
        fields = {}
        offset = FIRST_CATEGORICAL_ID
        for name, kept in zip(CATEGORICAL_NAMES, ranked):
            fields[name] = {"offset": offset, "unknown_id": offset,
                            "values": {value: offset + 1 + i for i, value in enumerate(kept)}}
            offset += 1 + len(kept)
        return cls(fields)

    @classmethod
    def from_metadata(cls, metadata: schema.DatasetMetadata, path: str) -> "Vocabulary":
        """Takes the vocabulary of a converted dataset, checking its shape.

        Raises:
          ValueError: the metadata at `path` has no usable vocabulary.
        """
        if metadata.split is not None:
            raise ValueError("--vocab %s is the metadata of the %r split folder, which has no vocabulary: give "
                             "the dataset root holding it" % (path, metadata.split))
        missing = [name for name in CATEGORICAL_NAMES if name not in metadata.vocabulary]
        if missing:
            raise ValueError("--vocab %s has no vocabulary for %s; it must be the metadata of a converted "
                             "Criteo dataset" % (path, ", ".join(missing)))
        for name in CATEGORICAL_NAMES:
            entry = metadata.vocabulary[name]
            if not isinstance(entry, dict) or not {"offset", "unknown_id", "values"} <= set(entry):
                raise ValueError("--vocab %s: vocabulary of %s needs offset, unknown_id and values, got %r"
                                 % (path, name, sorted(entry) if isinstance(entry, dict) else entry))
        vocabulary = cls(metadata.vocabulary)
        if vocabulary.feature_size > metadata.feature_size:
            raise ValueError("--vocab %s: vocabulary uses ids up to %d but feature_size is %d"
                             % (path, vocabulary.feature_size - 1, metadata.feature_size))
        return vocabulary

    @property
    def feature_size(self) -> int:
        """Largest id + 1."""
        return max(max([entry["unknown_id"]] + list(entry["values"].values())) for entry in self.fields.values()) + 1

    def ids(self, categorical: Sequence[str]) -> List[int]:
        """Maps C1..C26 of one record to ids."""
        return [mapping.get(value, unknown) for mapping, value, unknown in zip(self._maps, categorical, self._unknown)]

    def sizes(self) -> List[int]:
        """Kept values per field (not counting the unknown id)."""
        return [len(self.fields[name]["values"]) for name in CATEGORICAL_NAMES]

    def lookup_tables(self) -> List[Tuple[np.ndarray, np.ndarray, int]]:
        """Per field (keys sorted by their bytes, their ids, the unknown id), for `_lookup`."""
        tables = []
        for mapping, unknown in zip(self._maps, self._unknown):
            encoded = [value.encode("utf-8") for value in mapping]
            keys = np.array(encoded, dtype=vocab_lib.key_dtype(max([0] + [len(v) for v in encoded])))
            ids = np.array(list(mapping.values()), dtype=np.int64)
            order = np.argsort(vocab_lib.sortable(keys), kind="stable")
            tables.append((keys[order], ids[order], unknown))
        return tables


def load_vocab(vocab: str) -> Tuple[Vocabulary, schema.DatasetMetadata]:
    """The vocabulary and metadata of `vocab` (a `metadata.json` or a dataset root holding one), checked."""
    metadata = schema.DatasetMetadata.read(vocab)
    vocabulary = Vocabulary.from_metadata(metadata, vocab)
    if len(metadata.dense_clip) != schema.NUM_DENSE_FIELDS:
        raise ValueError("--vocab %s: dense_clip must have %d values, got %r"
                         % (vocab, schema.NUM_DENSE_FIELDS, metadata.dense_clip))
    return vocabulary, metadata
