"""What a Criteo conversion is asked to do: `ConversionOptions`, checked when made."""

import dataclasses
import os
from typing import Optional

from cli import config_flags

DEFAULT_VAL_FRACTION = 0.1
DEFAULT_SHARDS = 4
DEFAULT_MIN_COUNT = 10
DEFAULT_MEMORY_MB = 512
DEFAULT_CHUNK_BYTES = 16 << 20
DEFAULT_SHUFFLE_SEED = 0
LIBSVM_LAYOUTS = ("fixed", "compact")
FIXED_LAYOUT = LIBSVM_LAYOUTS[0]


@dataclasses.dataclass(frozen=True)
class ConversionOptions:
    """How to convert Criteo TSV files into a dataset root.

    Attributes:
      val_fraction: share of lines (by a hash of each line) that go to the
        validation split, in [0, 1); 0 writes every line to `train/`.
      shards: shard files per split and format.
      vocab: a `metadata.json`, or a dataset root holding one, whose
        vocabulary and clip values to apply instead of building a
        vocabulary; values it lacks map to their field's unknown id.
      min_count: frequency cutoff when building the vocabulary (None:
        `DEFAULT_MIN_COUNT`); not allowed together with `vocab`.
      skip_bad_records: skip and count malformed lines instead of failing.
      overwrite: replace a dataset already in the output directory.
      workers: processes that run the passes (None: the cores); the output
        does not depend on it.
      memory_mb: budget for the value counts of all processes together;
        past it, counts go to sorted runs on disk. The interpreter and numpy
        add about 40 MB per process, and the kept vocabulary must fit
        besides.
      chunk_bytes: size of the byte ranges the inputs are cut into.
      shuffle: write the rows in a random order across all shards.
      seed: the shuffle's seed.
      negative_sampling: keep each train row labelled 0 with this
        probability, in (0, 1]; recorded in the metadata's `source`.
      libsvm_layout: `fixed` (every line the same length, which the
        pipeline decodes fastest; see `encoders.encode_libsvm_fixed`) or
        `compact` (shortest numbers).
      tmp_dir: where count runs and shuffle buckets go (None: the system's
        temporary directory); removed at the end.

    Raises:
      ValueError: a value out of its range, or `min_count` with `vocab`; the
        message names the option and the value.
    """

    val_fraction: float = config_flags.field(DEFAULT_VAL_FRACTION, "Share of lines for the validation split; 0: "
                                                                   "none.")
    shards: int = config_flags.field(DEFAULT_SHARDS, "Shard files per split and format (rows balanced to one row; a "
                                                     "multiple of the training workers gives each the same rows).")
    vocab: Optional[str] = config_flags.field(None, "metadata.json (or dataset root) whose vocabulary to apply.")
    min_count: Optional[int] = config_flags.field(None, "Frequency cutoff of the vocabulary (default %d)."
                                                  % DEFAULT_MIN_COUNT)
    skip_bad_records: bool = config_flags.field(False, "Skip and count malformed lines instead of failing.")
    overwrite: bool = config_flags.field(False, "Replace a dataset already in --output_dir.")
    workers: Optional[int] = config_flags.field(None, "Processes for both passes (default: the cores).")
    memory_mb: float = config_flags.field(float(DEFAULT_MEMORY_MB), "Memory for the value counts of all processes; "
                                                                    "past it they spill to sorted runs on disk.")
    # The library's alone (no flag).
    chunk_bytes: int = DEFAULT_CHUNK_BYTES
    shuffle: bool = config_flags.field(False, "Write the rows in a random order across all shards.")
    seed: int = config_flags.field(DEFAULT_SHUFFLE_SEED, "Seed of --shuffle.")
    negative_sampling: float = config_flags.field(1.0, "Keep train rows labelled 0 with this probability; recorded "
                                                       "in metadata.json (see dataprep.criteo.recalibrate).")
    libsvm_layout: str = config_flags.field(FIXED_LAYOUT, "fixed: equal-length LibSVM lines, decoded fastest; "
                                                          "compact: shortest numbers.", choices=LIBSVM_LAYOUTS)
    tmp_dir: Optional[str] = config_flags.field(None, "Directory for count runs and shuffle buckets (default: system "
                                                      "temp).")

    def __post_init__(self):
        if not 0.0 <= self.val_fraction < 1.0:
            raise ValueError("val_fraction must be in [0, 1), got %r" % self.val_fraction)
        if self.shards < 1:
            raise ValueError("shards must be >= 1, got %r" % self.shards)
        if self.vocab is not None and self.min_count is not None:
            raise ValueError("min_count (%r) applies only when building a vocabulary, not with vocab=%r"
                             % (self.min_count, self.vocab))
        if self.min_count is not None and self.min_count < 1:
            raise ValueError("min_count must be >= 1, got %r" % self.min_count)
        if self.workers is not None and self.workers < 1:
            raise ValueError("workers must be >= 1, got %r" % self.workers)
        if not self.memory_mb > 0:
            raise ValueError("memory_mb must be > 0, got %r" % self.memory_mb)
        if self.chunk_bytes < 1:
            raise ValueError("chunk_bytes must be >= 1, got %r" % self.chunk_bytes)
        if not 0.0 < self.negative_sampling <= 1.0:
            raise ValueError("negative_sampling must be in (0, 1], got %r" % self.negative_sampling)
        if self.libsvm_layout not in LIBSVM_LAYOUTS:
            raise ValueError("libsvm_layout must be one of %s, got %r"
                             % (", ".join(LIBSVM_LAYOUTS), self.libsvm_layout))

    def processes(self) -> int:
        """The worker processes: `workers`, else this machine's cores."""
        return self.workers or os.cpu_count() or 1

    def vocabulary_min_count(self) -> int:
        """The frequency cutoff a built vocabulary uses."""
        return DEFAULT_MIN_COUNT if self.min_count is None else self.min_count
