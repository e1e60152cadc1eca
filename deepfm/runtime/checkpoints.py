"""Checkpoints a training run can trust.

Before training resumes from a model directory:

* **Unreadable checkpoints are skipped.** A checkpoint cut short (a process
  killed or a disk filled while it was written, a file lost in a copy) is
  found by reading every tensor of it (TensorFlow checks each tensor's
  CRC32C as it reads it). The newest readable checkpoint is the one training
  resumes from; each skipped one is named in a warning, and the chief
  rewrites the `checkpoint` state file to point at the good one, so every
  later reader (the Estimator's restore, Horovod's resume step, evaluation)
  sees the same. The skipped files stay where they are.
* **A checkpoint of another model shape is refused**, never half-loaded. The
  expected shapes come from building the model_fn once in a scratch graph,
  in PREDICT mode on one device (`model_shapes`); every model variable of the
  checkpoint (those under the model's top-level scopes, optimizer slots and
  other children of a variable aside) must exist with the same shape, and
  every model variable must be in the checkpoint. The error lists each
  difference with both shapes, e.g. a checkpoint written with another
  `--embedding_size`, `--feature_size` or `--deep_layers`. Any model_fn
  works: one that creates its tables through the strategy's `ModelContext`
  has the same variable names and shapes under every strategy.

While training runs, `save_errors` turns a full disk during a checkpoint
save into `CheckpointSaveError`, which names the directory, the free space
and the latest complete checkpoint. TensorFlow writes a checkpoint's files
under temporary names and updates the state file only after they are
complete, so a failed save never becomes the latest checkpoint.
"""

import contextlib
import errno
import json
import os
import re
import shutil
from typing import Dict, Iterator, List, Optional, Tuple

import numpy as np
import tensorflow as tf
from absl import logging

from deepfm.config import ModelConfig
from deepfm.models import ctr
from strategies.sharded import row_stream

GLOBAL_STEP = tf.compat.v1.GraphKeys.GLOBAL_STEP
NO_SPACE_MESSAGE = os.strerror(errno.ENOSPC)
MIB = 1 << 20
# Differences listed in a shape-mismatch error; more are counted.
MAX_LISTED_DIFFERENCES = 8
MISSING = "absent"
STATE_FILE = "checkpoint"
# What TensorFlow's checkpoint reader raises on a damaged file (a short read
# surfaces as IndexError, a bad CRC or header as DataLossError).
READ_ERRORS = (tf.errors.OpError, ValueError, IndexError, OSError, RuntimeError)

# The largest tensor `unreadable_reason` reads back whole: a larger one (an embedding table, a slot of one) is
# checked against the data files' size instead. Reading each back held a second copy of the largest table in
# every process that resumed (a ps worker resuming a 20M-id model: 3.8 GB, against 0.8 GB at its start).
READ_WHOLE_BYTES = 64 << 20

# A checkpoint save cut short: TensorFlow's sharded saver writes `<prefix>-<step>_temp/part-...`.
PARTIAL_SAVE = re.compile(r"^.+-\d+_temp$")
# A file written through a temporary name: TensorFlow's atomic writes (`<file>.tmp<32 hex>`: the state file
# `checkpoint`, a checkpoint's `.meta` graph, `graph.pbtxt`), this package's `<file>.tmp` (`write_state`,
# `run_config.write`, `input_position.record`).
PARTIAL_RECORD = re.compile(r"^([\w.-]+\.tmp[0-9a-f]{32}|[\w.]+\.json\.tmp|%s\.tmp)$" % STATE_FILE)

Shapes = Dict[str, Tuple[int, ...]]


class ModelShapeMismatchError(ValueError):
    """The checkpoint to resume from holds a model of another shape."""


class NoReadableCheckpointError(ValueError):
    """A model directory lists checkpoints, none of which can be read."""


class CheckpointSaveError(RuntimeError):
    """A checkpoint could not be written (e.g. the disk is full)."""


def checkpoint_step(path: str) -> int:
    """The global step stored in the checkpoint with prefix `path`."""
    return int(tf.train.load_variable(path, GLOBAL_STEP))


def listed_checkpoints(model_dir: str) -> List[str]:
    """The checkpoint prefixes the state file of `model_dir` lists, oldest first, the latest last.

    Each is a path to open as it is: TensorFlow's `get_checkpoint_state`
    already joins the entries the saver wrote relative to the directory (its
    usual form) with `model_dir`, whether `model_dir` is absolute or relative
    to the working directory; joining them again would name
    `runs/m/runs/m/model.ckpt-N` for `--model_dir runs/m`.
    """
    state = tf.train.get_checkpoint_state(model_dir)
    if state is None:
        return []
    paths: List[str] = []
    for path in list(state.all_model_checkpoint_paths) + [state.model_checkpoint_path]:
        if not path:
            continue
        if path in paths:
            paths.remove(path)
        paths.append(path)
    return paths


def unreadable_reason(path: str, read_whole_bytes: int = READ_WHOLE_BYTES) -> Optional[str]:
    """Why the checkpoint with prefix `path` cannot be restored, or None when it can.

    Its index must parse; every tensor of at most `read_whole_bytes` is read
    back (its checksum checked); the larger ones (embedding tables and their
    slots) are not loaded, which would hold a second copy of each in the
    process that checks, but the data files must hold every byte the index
    promises. A large tensor whose bytes are damaged in place is then found
    by the restore itself, which fails naming it.

    Args:
      path: the checkpoint's prefix.
      read_whole_bytes: the largest tensor read back whole.
    """
    try:
        reader = tf.train.load_checkpoint(path)
        dtypes = reader.get_variable_to_dtype_map()
        promised = 0
        for name, shape in reader.get_variable_to_shape_map().items():
            dtype = tf.as_dtype(dtypes[name])
            if dtype == tf.string:
                reader.get_tensor(name)
                continue
            size = int(np.prod(shape, dtype=np.int64)) * dtype.size
            promised += size
            if size <= read_whole_bytes:
                reader.get_tensor(name)
        held = sum(tf.io.gfile.stat(data).length for data in tf.io.gfile.glob(path + ".data-*"))
        if held < promised:
            return ("DataLossError: the data files of %s hold %d bytes, fewer than the %d its tensors need (a "
                    "save cut short?)" % (path, held, promised))
    except READ_ERRORS as e:
        return "%s: %s" % (type(e).__name__, str(e).strip().splitlines()[0] if str(e).strip() else "")
    return None


def resume_checkpoint(model_dir: str, repair: bool = True) -> Optional[str]:
    """The newest readable checkpoint of `model_dir`, skipping unreadable ones with a warning.

    Args:
      model_dir: the model directory.
      repair: rewrite the state file to point at the checkpoint returned
        when a newer one was skipped (the chief; other processes only read).

    Returns:
      The checkpoint prefix, or None when the directory lists none.

    Raises:
      NoReadableCheckpointError: checkpoints are listed and none is readable
        (training would silently start over).
    """
    paths = listed_checkpoints(model_dir)
    skipped: List[str] = []
    for index in range(len(paths) - 1, -1, -1):
        reason = unreadable_reason(paths[index])
        if reason is None:
            if skipped and repair:
                repair_state(model_dir, paths[index])
            return paths[index]
        logging.warning("checkpoint %s is unreadable and is skipped (%s); resuming from an earlier one",
                        paths[index], reason)
        skipped.append(paths[index])
    if skipped:
        raise NoReadableCheckpointError(
            "--model_dir %r: none of its checkpoints can be read (%s); move them away to start over"
            % (model_dir, ", ".join(skipped)))
    return None


def repair_state(model_dir: str, checkpoint: str) -> bool:
    """Points the state file of `model_dir` at `checkpoint` where it names a newer one; returns whether it did.

    The newer ones (unreadable, see `resume_checkpoint`) are left out of the
    state file; their files stay where they are.
    """
    paths = listed_checkpoints(model_dir)
    if checkpoint not in paths or paths[-1] == checkpoint:
        return False
    write_state(model_dir, paths[:paths.index(checkpoint) + 1])
    logging.warning("rewrote %s to resume from %s", os.path.join(model_dir, STATE_FILE), checkpoint)
    return True


def write_state(model_dir: str, paths: List[str]) -> None:
    """Rewrites the state file of `model_dir` (atomically): `paths` oldest first, the last the latest.

    Paths inside `model_dir` are written relative to it, as TensorFlow's
    saver writes them, so the directory can be moved or synced elsewhere.
    """
    def entry(path):
        relative = os.path.relpath(path, model_dir)
        return json.dumps(path if relative.startswith(os.pardir) else relative)
    lines = ["model_checkpoint_path: %s" % entry(paths[-1])]
    lines += ["all_model_checkpoint_paths: %s" % entry(path) for path in paths]
    state = os.path.join(model_dir, STATE_FILE)
    with open(state + ".tmp", "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(state + ".tmp", state)


def remove_partial_files(model_dir: str) -> List[str]:
    """Removes what saves cut short left in `model_dir` (the chief, before training); returns the paths.

    TensorFlow writes a checkpoint's files into `<prefix>-<step>_temp/` and
    moves them into place once complete, and the state file and the meta
    graph through `<file>.tmp<hex>`; this package writes its records through
    `.tmp` files. A process killed in between leaves these behind, and nothing else
    ever removes them. Complete checkpoints are never touched.
    """
    removed = []
    for name in sorted(os.listdir(model_dir)):
        target = os.path.join(model_dir, name)
        if (PARTIAL_SAVE.match(name) and os.path.isdir(target)) or (
                PARTIAL_RECORD.match(name) and os.path.isfile(target)):
            if os.path.isdir(target):
                shutil.rmtree(target, ignore_errors=True)
            else:
                os.remove(target)
            logging.warning("removed %s, left by a save that was cut short (a killed process)", target)
            removed.append(target)
    return removed


def model_shapes(model: ModelConfig, model_fn) -> Shapes:
    """The shape of every variable `model_fn` creates for `model`, by name (built once in a scratch graph)."""
    with tf.Graph().as_default():
        features = ctr.serving_input_receiver_fn(model.field_size)().features
        model_fn(features, None, tf.estimator.ModeKeys.PREDICT, ctr.model_params(model))
        return {v.op.name: tuple(v.shape.as_list()) for v in tf.compat.v1.global_variables()
                if v.op.name != GLOBAL_STEP}


def checkpoint_model_shapes(path: str, scopes) -> Shapes:
    """The variables of a checkpoint under `scopes` and their shapes (optimizer slots and other children left out)."""
    shapes = {name: tuple(shape) for name, shape in tf.train.list_variables(path)
              if name.split("/", 1)[0] in scopes}
    ranks = row_stream.saved_ranks(path)
    if ranks is not None:
        # Sharded tables (`hybrid`): every rank's rows beside the checkpoint; the table has all of them.
        for rank in range(ranks):
            for name, shape in tf.train.list_variables(row_stream.shard_prefix(path, rank, ranks)):
                if name.split("/", 1)[0] in scopes:
                    rows = shapes.get(name, (0,))[0]
                    shapes[name] = (rows + shape[0],) + tuple(shape[1:])
    return {name: shape for name, shape in shapes.items()
            if not any(name.startswith(other + "/") for other in shapes if other != name)}


def check_model_shapes(path: str, model: ModelConfig, model_fn) -> None:
    """Refuses a checkpoint whose model variables differ from those `model_fn` creates for `model`.

    Raises:
      ModelShapeMismatchError: a variable differs in shape or exists on one
        side only; the message lists the checkpoint's and the model's shape
        of each.
    """
    expected = model_shapes(model, model_fn)
    found = checkpoint_model_shapes(path, {name.split("/", 1)[0] for name in expected})
    differences = ["%s: checkpoint %s, this model %s" % (name, _shape(found.get(name)), _shape(expected.get(name)))
                   for name in sorted(set(expected) | set(found)) if expected.get(name) != found.get(name)]
    if differences:
        more = len(differences) - MAX_LISTED_DIFFERENCES
        listed = differences[:MAX_LISTED_DIFFERENCES] + (["... %d more" % more] if more > 0 else [])
        raise ModelShapeMismatchError(
            "checkpoint %s holds a model of another shape than this run's (feature_size %d, field_size %d, "
            "embedding_size %d, deep_layers %s); it is not loaded. Use the flags it was trained with "
            "or a new --model_dir:\n  %s" % (
                path, model.feature_size, model.field_size, model.embedding_size,
                ",".join(str(w) for w in model.deep_layers), "\n  ".join(listed)))


def _shape(shape: Optional[Tuple[int, ...]]) -> str:
    return MISSING if shape is None else "[%s]" % ", ".join(str(d) for d in shape)


def is_no_space_error(error: BaseException) -> bool:
    """Whether `error` (an OSError or a TensorFlow error) means the device is full."""
    if isinstance(error, OSError) and error.errno == errno.ENOSPC:
        return True
    return isinstance(error, tf.errors.OpError) and NO_SPACE_MESSAGE in str(error)


@contextlib.contextmanager
def save_errors(model_dir: str) -> Iterator[None]:
    """Within the block, a full disk while writing to `model_dir` raises `CheckpointSaveError`.

    Raises:
      CheckpointSaveError: the message names `model_dir`, its free space and
        the latest complete checkpoint, which is left as it was.
    """
    try:
        yield
    except (tf.errors.OpError, OSError) as e:
        if not is_no_space_error(e):
            raise
        try:
            free = "%.1f MiB free" % (shutil.disk_usage(model_dir).free / MIB)
        except OSError:
            free = "free space unknown"
        latest = tf.train.latest_checkpoint(model_dir)
        raise CheckpointSaveError(
            "writing to --model_dir %r failed: no space left on its device (%s). The latest complete "
            "checkpoint is still %s; free some space and run the same command again to resume from it"
            % (model_dir, free, latest or "none")) from e
