"""Scores data files with an exported SavedModel of this package and writes a CSV.

    python -m deepfm.predict --saved_model runs/m1/export/1795320872 \\
        --data data/synthetic/validation --output predictions.csv

The CSV has a header and one row per input row, in input order (the files in
the sorted order `--data` resolves them to, each file's rows in order):
`prob`, the model's click probability, and `label` when the data has labels
(LibSVM always; TFRecord when its records hold the `label` feature). The data
is read and scored a batch at a time, so memory stays constant whatever the
size of the input. `--data` takes files, globs or directories; a dataset root
means its `validation/` files.
"""

import csv
import dataclasses
import os
import time
from typing import Iterator, List, Optional, Sequence, Tuple

from absl import app, flags

from cli import config_flags, entry
from input_pipeline import format_base, formats, schema

PROGRAM = "deepfm.predict"
DEFAULT_BATCH_SIZE = 4096
PROB_COLUMN = "prob"
LABEL_COLUMN = "label"
# float32 probabilities keep all their digits in 9 significant ones.
PROB_FORMAT = "%.9g"
LABEL_FORMAT = "%g"


@dataclasses.dataclass(frozen=True)
class PredictConfig:
    """What `python -m deepfm.predict` scores, and where (its flags are these fields)."""

    saved_model: Optional[str] = dataclasses.field(
        metadata=config_flags.metadata("The SavedModel directory (one timestamped export)."))
    data: Optional[Tuple[str, ...]] = dataclasses.field(
        metadata=config_flags.metadata("Files, globs or directories to score (a dataset root: its validation/ "
                                       "files)."))
    output: Optional[str] = dataclasses.field(
        metadata=config_flags.metadata("The CSV to write; an existing file is refused."))
    data_format: str = config_flags.field(formats.TFRECORD.name, "Format of the data files.",
                                          choices=formats.names())
    batch_size: int = config_flags.field(DEFAULT_BATCH_SIZE, "Rows scored per call of the model.")

    def __post_init__(self):
        for name in REQUIRED:
            if not getattr(self, name):
                raise ValueError("--%s is required" % name)


# Checked as the flags are parsed, before TensorFlow is imported.
REQUIRED = ("saved_model", "data", "output")


def define_flags() -> None:
    """Defines the flags of the entry point (`PredictConfig`'s fields)."""
    config_flags.define_flags([PredictConfig])
    flags.mark_flags_as_required(list(REQUIRED))


def serving_signature(saved_model: str):
    """The loaded SavedModel, its serving signature and its field size.

    The loaded object owns the signature's variables: keep it while the
    signature is used.

    Raises:
      ValueError: `saved_model` is not a SavedModel with the DeepFM serving
        signature (`feat_ids`, `feat_vals` -> `prob`).
    """
    import tensorflow as tf

    from deepfm.models import ctr

    if not tf.saved_model.contains_saved_model(saved_model):
        raise ValueError("--saved_model %r holds no SavedModel (saved_model.pb); pass one timestamped "
                         "directory under the --export_dir of training" % saved_model)
    try:
        loaded = tf.saved_model.load(saved_model)
    except (OSError, ValueError, tf.errors.OpError) as e:
        reason = str(getattr(e, "message", e)).strip().splitlines()[0]
        raise ValueError("--saved_model %r is not a readable SavedModel (%s): pass one complete timestamped "
                         "directory under the --export_dir of training" % (saved_model, reason)) from None
    signature = loaded.signatures.get(tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY)
    if signature is None:
        raise ValueError("--saved_model %r has no %r signature (it has %s)" % (
            saved_model, tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY, sorted(loaded.signatures)))
    inputs = signature.structured_input_signature[1]
    missing = {schema.FEAT_IDS, schema.FEAT_VALS} - set(inputs)
    if missing or ctr.SERVING_SIGNATURE_OUTPUT not in signature.structured_outputs:
        raise ValueError("--saved_model %r is not an export of this package: its serving signature takes %s and "
                         "returns %s" % (saved_model, sorted(inputs), sorted(signature.structured_outputs)))
    return loaded, signature, int(inputs[schema.FEAT_IDS].shape[1])


def batches(paths: Sequence[str], data_format: format_base.DataFormat, field_size: int, batch_size: int,
            labelled: bool):
    """The batches of `paths` in input order, every row once: `(features, labels)`, or `features` alone."""
    import tensorflow as tf

    from input_pipeline import pipeline

    config = pipeline.PipelineConfig(data_format=data_format, field_size=field_size, num_parallel_reads=1,
                                     drop_remainder=False)
    if labelled:
        return pipeline.DatasetBuilder(list(paths), config, batch_size=batch_size, num_epochs=1)(None)
    return pipeline.with_options(
        data_format.decoded_batches(list(paths), config, batch_size, labelled=False).prefetch(tf.data.AUTOTUNE), config)


def predict_rows(signature, dataset, labelled: bool) -> Iterator[Tuple[List, Optional[List]]]:
    """Yields `(probabilities, labels or None)` per batch of `dataset`."""
    from deepfm.models import ctr
    for element in dataset:
        features, labels = element if labelled else (element, None)
        prob = signature(**{schema.FEAT_IDS: features[schema.FEAT_IDS],
                            schema.FEAT_VALS: features[schema.FEAT_VALS]})[ctr.SERVING_SIGNATURE_OUTPUT]
        yield prob.numpy().reshape(-1).tolist(), (labels.numpy().reshape(-1).tolist() if labels is not None else None)


def write_predictions(saved_model: str, data: Sequence[str], data_format: formats.DataFormatLike, output: str,
                      batch_size: int = DEFAULT_BATCH_SIZE) -> Tuple[int, float]:
    """Scores `data` (in `data_format`, a format or its name) with `saved_model` into the CSV `output`.

    Returns:
      (rows written, seconds).

    Raises:
      ValueError: a bad SavedModel, an unknown format, no data files, files
        of another field size than the model's, or an existing `output`.
    """
    from input_pipeline import files

    if batch_size < 1:
        raise ValueError("--batch_size must be >= 1, got %r" % batch_size)
    if os.path.exists(output):
        raise ValueError("--output %r exists; remove it or choose another file" % output)
    data_format = formats.as_format(data_format)
    paths = files.resolve(list(data), data_format, split=schema.VALIDATION_SPLIT)
    loaded, signature, field_size = serving_signature(saved_model)
    labelled = data_format.has_labels(paths[0])
    dataset = batches(paths, data_format, field_size, batch_size, labelled)
    directory = os.path.dirname(os.path.abspath(output))
    os.makedirs(directory, exist_ok=True)
    start = time.perf_counter()
    rows = 0
    partial = output + ".partial"
    with open(partial, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([PROB_COLUMN, LABEL_COLUMN] if labelled else [PROB_COLUMN])
        for probs, labels in predict_rows(signature, dataset, labelled):
            if labelled:
                writer.writerows((PROB_FORMAT % p, LABEL_FORMAT % y) for p, y in zip(probs, labels or []))
            else:
                writer.writerows((PROB_FORMAT % p,) for p in probs)
            rows += len(probs)
    os.replace(partial, output)
    del loaded
    return rows, time.perf_counter() - start


def _main(argv):
    if len(argv) > 1:
        raise app.UsageError("unexpected arguments: %s" % " ".join(argv[1:]))
    entry.configure_logging(entry.flags_want_detail())
    config = PredictConfig(**config_flags.values(PredictConfig, flags.FLAGS))
    assert config.saved_model and config.data and config.output
    rows, seconds = write_predictions(config.saved_model, config.data, formats.get(config.data_format), config.output,
                                      config.batch_size)
    print("scored %d rows in %.1f s (%s rows/sec) -> %s" % (
        rows, seconds, format(rows / seconds if seconds > 0 else 0.0, ",.0f"), config.output))


def run():
    """Console-script entry point."""
    entry.run(_main, PROGRAM, define_flags, entry.TENSORFLOW_AFTER_FLAGS)


if __name__ == "__main__":
    run()
