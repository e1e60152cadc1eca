"""Generates a synthetic, Criteo-shaped DeepFM dataset with a known best AUC.

The dataset root has the layout of `input_pipeline.schema` and the id layout
of `dataprep.criteo`: ids 1..13 are the integer fields, then the 26
categorical fields each own a block of ids.

* Categorical fields: field f has `V_f` ids, the sizes spread log-uniformly
  over the fields (a few tiny fields, a few huge ones, as in Criteo) and
  summing to `feature_size - 14`. Each row draws one id per field from a
  Zipf law (exponent `ZIPF_EXPONENT`) over a fixed random order of the
  field's ids. Value 1.0.
* Integer fields: log-normal counts, missing at Criteo-like rates
  (`DENSE_MISSING_RATE`), turned into values exactly as the Criteo
  converter does: `min(raw, clip) / clip` with `criteo.DENSE_CLIP`, 0 when
  missing.
* Labels: Bernoulli draws from a planted factorization machine,
  `sigmoid(bias + sum_i w[id_i] x_i + sum_{i<j} <v[id_i], v[id_j]> x_i x_j)`,
  with Gaussian `w` and `v`. Its scale is set so the logit has standard
  deviation `TARGET_LOGIT_STD` and its bias so `TARGET_POSITIVE_RATE` of the
  rows are positive (both measured on a calibration sample), which gives a
  planted AUC near 0.8: learnable, not trivial.

The planted parameters are saved to `DIR/planted_model.npz` (`bias`,
`weights` [feature_size], `factors` [feature_size, PLANTED_FACTOR_DIM]) and
the AUC of the planted logits on the validation split to
`metadata.planted_auc`: the AUC a perfectly trained model would reach.

Usage::

    python -m dataprep.synthetic --rows 1000000 --output_dir data/synthetic
"""

import dataclasses
import math
import os
import time
from typing import List, Optional, Sequence, Tuple

import numpy as np
from absl import app, flags

from cli import config_flags, entry
from dataprep import criteo, writers
from input_pipeline import encoders, schema

PROGRAM = "dataprep.synthetic"

DEFAULT_FEATURE_SIZE = 117581  # the feature_size of the lambdaji / SageMaker DeepFM samples
DEFAULT_VAL_FRACTION = 0.1
DEFAULT_SHARDS = 4
DEFAULT_SEED = 0
CHUNK_ROWS = 100_000
PLANTED_MODEL_FILE = "planted_model.npz"

ZIPF_EXPONENT = 1.1
# Field vocabulary sizes are proportional to 10**(k * FIELD_SIZE_DECADES / 25),
# k = 0..25: the largest field is 10**FIELD_SIZE_DECADES times the smallest.
FIELD_SIZE_DECADES = 4.0
MIN_FIELD_VOCAB = 2
# Missing rates of I1..I13, close to those of the Kaggle Criteo data.
DENSE_MISSING_RATE = (0.45, 0.0, 0.2, 0.2, 0.03, 0.22, 0.04, 0.0, 0.04, 0.45, 0.04, 0.78, 0.2)
# Raw integer counts are log-normal with median clip / DENSE_MEDIAN_DIVISOR;
# with DENSE_LOG_SIGMA about 5% of them reach the clip, as the Criteo clip
# values are 95% quantiles.
DENSE_MEDIAN_DIVISOR = 20.0
DENSE_LOG_SIGMA = 1.8

PLANTED_FACTOR_DIM = 4
# Share of the planted logit's variance from the pairwise interactions
# (before calibration, for a row with all 39 values 1).
INTERACTION_SHARE = 0.5
TARGET_LOGIT_STD = 1.4
TARGET_POSITIVE_RATE = 0.25
CALIBRATION_ROWS = 50_000
_BIAS_SEARCH_STEPS = 60
_BIAS_SEARCH_RANGE = 20.0

_PARAMS_STREAM, _CALIBRATION_STREAM, _CHUNK_STREAM = 0, 1, 2
_MIN_FEATURE_SIZE = criteo.FIRST_CATEGORICAL_ID + schema.NUM_CATEGORICAL_FIELDS * MIN_FIELD_VOCAB


def field_vocab_sizes(feature_size: int) -> List[int]:
    """Ids per categorical field; they sum to `feature_size - 14`.

    Raises:
      ValueError: `feature_size` leaves fewer than `MIN_FIELD_VOCAB` ids per field.
    """
    if feature_size < _MIN_FEATURE_SIZE:
        raise ValueError("feature_size must be >= %d (%d dense ids + id 0 + %d ids for each of %d fields), got %r"
                         % (_MIN_FEATURE_SIZE, schema.NUM_DENSE_FIELDS, MIN_FIELD_VOCAB,
                            schema.NUM_CATEGORICAL_FIELDS, feature_size))
    total = feature_size - criteo.FIRST_CATEGORICAL_ID
    weights = np.logspace(0.0, FIELD_SIZE_DECADES, schema.NUM_CATEGORICAL_FIELDS)
    spare = total - MIN_FIELD_VOCAB * schema.NUM_CATEGORICAL_FIELDS
    sizes = MIN_FIELD_VOCAB + np.floor(weights / weights.sum() * spare).astype(np.int64)
    sizes[-1] += total - sizes.sum()
    return [int(s) for s in sizes]


class PlantedModel:
    """The planted factorization machine and the sampler of rows.

    Attributes:
      bias: scalar.
      weights: float32 [feature_size], first-order weights.
      factors: float32 [feature_size, PLANTED_FACTOR_DIM].
    """

    def __init__(self, feature_size: int, seed: int):
        """Draws the field layout, the Zipf orders and the model; calibrates it."""
        rng = np.random.default_rng([seed, _PARAMS_STREAM])
        self.feature_size = feature_size
        sizes = field_vocab_sizes(feature_size)
        self.offsets = criteo.FIRST_CATEGORICAL_ID + np.concatenate([[0], np.cumsum(sizes)[:-1]])
        self._orders = [rng.permutation(size) for size in sizes]
        self._cdfs = []
        for size in sizes:
            cdf = np.cumsum(np.arange(1, size + 1, dtype=np.float64) ** -ZIPF_EXPONENT)
            self._cdfs.append(cdf / cdf[-1])
        pairs = schema.FIELD_SIZE * (schema.FIELD_SIZE - 1) / 2
        # Var(<v_a, v_b>) = k * s**4, summed over the pairs, against
        # FIELD_SIZE first-order terms of variance 1.
        factor_std = (INTERACTION_SHARE / (1 - INTERACTION_SHARE) * schema.FIELD_SIZE
                      / (pairs * PLANTED_FACTOR_DIM)) ** 0.25
        self.weights = rng.standard_normal(feature_size).astype(np.float32)
        self.factors = (factor_std * rng.standard_normal((feature_size, PLANTED_FACTOR_DIM))).astype(np.float32)
        self.weights[0] = 0.0
        self.factors[0] = 0.0
        self.bias = 0.0
        self._calibrate(np.random.default_rng([seed, _CALIBRATION_STREAM]))

    def _calibrate(self, rng: np.random.Generator) -> None:
        ids, values = self.sample_features(CALIBRATION_ROWS, rng)
        logits = self.logits(ids, values)
        scale = TARGET_LOGIT_STD / logits.std()
        self.weights *= np.float32(scale)
        self.factors *= np.float32(math.sqrt(scale))
        logits = self.logits(ids, values)
        low, high = -_BIAS_SEARCH_RANGE, _BIAS_SEARCH_RANGE
        for _ in range(_BIAS_SEARCH_STEPS):
            mid = (low + high) / 2
            if _sigmoid(logits + mid).mean() < TARGET_POSITIVE_RATE:
                low = mid
            else:
                high = mid
        self.bias = (low + high) / 2

    def sample_features(self, rows: int, rng: np.random.Generator) -> Tuple[np.ndarray, np.ndarray]:
        """Draws ids int64 [rows, 39] and values float32 [rows, 39] (as written)."""
        ids = np.empty((rows, schema.FIELD_SIZE), dtype=np.int64)
        values = np.ones((rows, schema.FIELD_SIZE), dtype=np.float64)
        ids[:, :schema.NUM_DENSE_FIELDS] = np.arange(schema.FIRST_DENSE_ID, criteo.FIRST_CATEGORICAL_ID)
        clips = np.asarray(criteo.DENSE_CLIP, dtype=np.float64)
        raw = np.floor(np.exp(rng.normal(np.log(clips / DENSE_MEDIAN_DIVISOR), DENSE_LOG_SIGMA,
                                         (rows, schema.NUM_DENSE_FIELDS))))
        missing = rng.random((rows, schema.NUM_DENSE_FIELDS)) < np.asarray(DENSE_MISSING_RATE)
        values[:, :schema.NUM_DENSE_FIELDS] = np.where(missing, 0.0, np.minimum(raw, clips) / clips)
        uniform = rng.random((rows, schema.NUM_CATEGORICAL_FIELDS))
        for f, (offset, order, cdf) in enumerate(zip(self.offsets, self._orders, self._cdfs)):
            rank = np.minimum(np.searchsorted(cdf, uniform[:, f]), cdf.size - 1)
            ids[:, schema.NUM_DENSE_FIELDS + f] = offset + order[rank]
        return ids, encoders.quantize_values(values)

    def logits(self, ids: np.ndarray, values: np.ndarray) -> np.ndarray:
        """Planted logits float64 [n] of ids [n, f] and values [n, f]."""
        x = values.astype(np.float64)
        linear = (self.weights[ids].astype(np.float64) * x).sum(axis=1)
        scaled = self.factors[ids].astype(np.float64) * x[:, :, None]  # [n, f, k]
        pairwise = 0.5 * ((scaled.sum(axis=1) ** 2).sum(axis=1) - (scaled ** 2).sum(axis=(1, 2)))
        return self.bias + linear + pairwise

    def save(self, path: str) -> None:
        """Writes bias, weights and factors to an .npz file."""
        np.savez(path, bias=np.float64(self.bias), weights=self.weights, factors=self.factors)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Exact ROC AUC from ranks (tied scores share their mean rank).

    Args:
      labels: [n] of 0/1.
      scores: [n] float.

    Returns:
      The probability that a random positive scores above a random negative
      (ties count one half).

    Raises:
      ValueError: the labels are all of one class.
    """
    labels = np.asarray(labels) > 0.5
    scores = np.asarray(scores)
    positives = int(labels.sum())
    negatives = labels.size - positives
    if not positives or not negatives:
        raise ValueError("AUC needs both classes, got %d positives and %d negatives" % (positives, negatives))
    order = np.argsort(scores, kind="mergesort")
    sorted_scores = scores[order]
    starts = np.flatnonzero(np.r_[True, sorted_scores[1:] != sorted_scores[:-1]])
    ends = np.r_[starts[1:], scores.size]
    mean_rank = (starts + ends + 1) / 2.0  # 1-based mean rank of each tie group
    ranks = np.empty(scores.size, dtype=np.float64)
    ranks[order] = np.repeat(mean_rank, ends - starts)
    return float((ranks[labels].sum() - positives * (positives + 1) / 2.0) / (positives * negatives))


def generate(rows: int, output_dir: str, *, feature_size: int = DEFAULT_FEATURE_SIZE,
             val_fraction: float = DEFAULT_VAL_FRACTION, shards: int = DEFAULT_SHARDS, seed: int = DEFAULT_SEED,
             overwrite: bool = False, chunk_rows: int = CHUNK_ROWS) -> schema.DatasetMetadata:
    """Writes a synthetic dataset root to `output_dir`.

    The last `round(rows * val_fraction)` rows form the validation split.
    The same arguments give byte-identical files.

    Args:
      rows: examples in total, >= 1.
      output_dir: the dataset root to write.
      feature_size: number of ids (largest id + 1).
      val_fraction: share of rows in the validation split, in [0, 1).
      shards: shard files per split and format.
      seed: seed of every random draw.
      overwrite: replace a dataset already in `output_dir`.
      chunk_rows: rows generated and written at once (bounds memory).

    Returns:
      The metadata written to `output_dir/metadata.json`; `planted_auc` is
      None when the validation split is empty or holds a single class.

    Raises:
      ValueError: a bad argument.
      FileExistsError: `output_dir` holds a dataset and not `overwrite`.
    """
    if rows < 1:
        raise ValueError("rows must be >= 1, got %r" % rows)
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError("val_fraction must be in [0, 1), got %r" % val_fraction)
    if shards < 1:
        raise ValueError("shards must be >= 1, got %r" % shards)
    if chunk_rows < 1:
        raise ValueError("chunk_rows must be >= 1, got %r" % chunk_rows)
    field_vocab_sizes(feature_size)
    writers.check_output_dir(output_dir, overwrite, extra_files=[PLANTED_MODEL_FILE])

    model = PlantedModel(feature_size, seed)
    validation_rows = int(round(rows * val_fraction))
    train_rows = rows - validation_rows
    writers.prepare_output_dir(output_dir, overwrite, extra_files=[PLANTED_MODEL_FILE])
    model.save(os.path.join(output_dir, PLANTED_MODEL_FILE))
    split_writers = {schema.TRAIN_SPLIT: writers.SplitWriter(output_dir, schema.TRAIN_SPLIT, shards)}
    if val_fraction > 0:
        split_writers[schema.VALIDATION_SPLIT] = writers.SplitWriter(output_dir, schema.VALIDATION_SPLIT, shards)
    validation_labels, validation_logits = [], []
    try:
        for chunk, start in enumerate(range(0, rows, chunk_rows)):
            rng = np.random.default_rng([seed, _CHUNK_STREAM, chunk])
            n = min(chunk_rows, rows - start)
            ids, values = model.sample_features(n, rng)
            logits = model.logits(ids, values)
            labels = (rng.random(n) < _sigmoid(logits)).astype(np.float32)
            cut = min(max(train_rows - start, 0), n)
            split_writers[schema.TRAIN_SPLIT].write(labels[:cut], ids[:cut], values[:cut])
            if cut < n:
                split_writers[schema.VALIDATION_SPLIT].write(labels[cut:], ids[cut:], values[cut:])
                validation_labels.append(labels[cut:])
                validation_logits.append(logits[cut:])
    finally:
        for writer in split_writers.values():
            writer.close()

    planted_auc = _planted_auc(validation_labels, validation_logits)
    metadata = schema.DatasetMetadata(
        feature_size=feature_size,
        splits={name: writer.split_info() for name, writer in split_writers.items()},
        dense_clip=[float(c) for c in criteo.DENSE_CLIP],
        planted_auc=planted_auc,
        source="synthetic: rows=%d seed=%d feature_size=%d val_fraction=%g; Zipf(%g) ids; labels from a planted "
        "FM (k=%d) in %s; %d positive rows"
        % (rows, seed, feature_size, val_fraction, ZIPF_EXPONENT, PLANTED_FACTOR_DIM, PLANTED_MODEL_FILE,
           sum(writer.positives for writer in split_writers.values())))
    metadata.write(output_dir, split_views=True)
    return metadata


def _planted_auc(labels: Sequence[np.ndarray], logits: Sequence[np.ndarray]) -> Optional[float]:
    if not labels:
        return None
    every_label = np.concatenate(labels)
    if every_label.min() == every_label.max():
        return None
    return auc(every_label, np.concatenate(logits))


@dataclasses.dataclass(frozen=True)
class SyntheticConfig:
    """What `python -m dataprep.synthetic` generates (its flags are these fields)."""

    rows: Optional[int] = dataclasses.field(
        metadata=config_flags.metadata("Examples to generate, train and validation together."))
    output_dir: Optional[str] = dataclasses.field(metadata=config_flags.metadata("Dataset root to write."))
    feature_size: int = config_flags.field(DEFAULT_FEATURE_SIZE, "Number of ids (largest id + 1).")
    val_fraction: float = config_flags.field(DEFAULT_VAL_FRACTION, "Share of rows for the validation split; 0: "
                                                                   "none.")
    shards: int = config_flags.field(DEFAULT_SHARDS, "Shard files per split and format.")
    seed: int = config_flags.field(DEFAULT_SEED, "Seed of every random draw.")
    overwrite: bool = config_flags.field(False, "Replace a dataset already in --output_dir.")

    def __post_init__(self):
        if self.rows is None:
            raise ValueError("--rows is required: the examples to generate")
        if not self.output_dir:
            raise ValueError("--output_dir is required: the dataset root to write")


def define_flags() -> None:
    """Defines the command-line flags of this tool (`SyntheticConfig`'s fields)."""
    config_flags.define_flags([SyntheticConfig])


def main(argv: Sequence[str]) -> None:
    """Generates the dataset with the parsed flags and prints a summary."""
    if len(argv) > 1:
        raise app.UsageError("unexpected arguments: %s" % " ".join(argv[1:]))
    try:
        config = SyntheticConfig(**config_flags.values(SyntheticConfig, flags.FLAGS))
    except ValueError as e:
        raise app.UsageError(str(e)) from e
    assert config.rows is not None and config.output_dir is not None
    start = time.time()
    try:
        metadata = generate(config.rows, config.output_dir, feature_size=config.feature_size,
                            val_fraction=config.val_fraction, shards=config.shards, seed=config.seed,
                            overwrite=config.overwrite)
    except (ValueError, OSError) as e:
        raise SystemExit("error: %s" % e) from e
    print(criteo.summary(config.output_dir, metadata, time.time() - start))
    print("  planted_auc: %s" % metadata.planted_auc)


def run() -> None:
    """Console entry point."""
    entry.run(main, PROGRAM, define_flags, entry.NO_TENSORFLOW)


if __name__ == "__main__":
    run()
