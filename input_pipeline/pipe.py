"""Reading Amazon SageMaker Pipe-mode channels with `PipeModeDataset`.

In Pipe mode SageMaker streams each input channel through named pipes
(FIFOs) instead of copying files. Under the base directory (`$SAGEMAKER_BASE_DIR`,
default `/opt/ml`)::

    input/config/inputdataconfig.json   {"train_0": {"TrainingInputMode": "Pipe", ...}, ...}
    input/data/<channel>_<epoch>        one FIFO per channel and pass (epoch 0, 1, ...)

The FIFO of epoch `e + 1` appears once epoch `e` has been written and closed.
The first process to open a FIFO takes its data, so the workers of one host
must read different channels (`input_pipeline.sharding.assign_channel`).

`sagemaker_tensorflow.PipeModeDataset` keeps, per channel, the index of the
next FIFO to open in a state file under `<base_dir>/pipe_state`; every
iterator created over it opens that FIFO and advances the index. A job that
builds its input pipeline again (e.g. `Estimator.train` called twice) thus
goes on with the next epoch.

Several epochs. `open_channel(..., epochs=N)` reads exactly the FIFOs
`<channel>_<k>` .. `<channel>_<k+N-1>` (`k` the index in the state file). It
does not call `PipeModeDataset.repeat(N)`: TensorFlow's finite repeat creates
one more iterator of its input after the last pass, which opens the FIFO of
epoch N and throws its data away (or waits for a FIFO that never comes).
Instead one `PipeModeDataset` per epoch is created lazily inside
`Dataset.flat_map`, so a FIFO is only opened when its records are wanted.
For the same reason a `.repeat(M)` applied on top of the returned dataset
reads exactly M more passes. `epochs=None` reads pass after pass without end,
as SageMaker supplies them; training then ends on its step count.

Waiting for FIFOs. `open_channel` checks the configuration and waits (polls)
up to `timeout_s` for the first FIFO before it returns, so a missing channel
fails at start. Before each later epoch the dataset waits again, up to
`timeout_s`, for that epoch's FIFO, and fails with an error naming the FIFO
when it does not appear (the reader's own wait, about 120 s, is never
reached). Once a FIFO exists, opening it blocks until its writer opens it,
as it does on SageMaker. A job whose step budget ends where the data
source stopped feeding would otherwise wait out that timeout at its end: its
input reads ahead into an epoch nobody wants, and the session cannot close
while that read waits. `release_waits()` ends every such wait at once (the
trainer calls it when training ends); a channel opened after it waits again.

TensorFlow logs `UNIMPLEMENTED: Cannot compute input sources for dataset of
type PipeModeDataset` when an iterator is created: `PipeModeDataset` does not
implement `InputDatasets`; the message is harmless.
"""

import json
import os
import threading
import time
from typing import TYPE_CHECKING, Dict, List, Optional

from input_pipeline import formats

if TYPE_CHECKING:
    import tensorflow as tf

BASE_DIR_ENV = "SAGEMAKER_BASE_DIR"
DEFAULT_BASE_DIR = "/opt/ml"
INPUT_CONFIG_SUBDIR = os.path.join("input", "config")
INPUT_DATA_SUBDIR = os.path.join("input", "data")
INPUT_DATA_CONFIG_FILE = "inputdataconfig.json"
PIPE_STATE_SUBDIR = "pipe_state"

TRAINING_INPUT_MODE_KEY = "TrainingInputMode"
PIPE_MODE = "Pipe"

DEFAULT_FIFO_TIMEOUT_S = 120.0
FIFO_POLL_INTERVAL_S = 0.05
# Repeat count of `tf.data.Dataset.repeat` meaning "without end".
REPEAT_FOREVER = -1
# What `PipeModeDataset`'s error says when a FIFO ends inside a record.
BROKEN_STREAM_MARK = "CRC check on"
# Channel -> the FIFO this process opened last for it.
_OPENED: Dict[str, str] = {}
# The waits of the channels opened since the last `release_waits` (set: stop waiting).
_WAITS: List[threading.Event] = []
_WAITS_LOCK = threading.Lock()


class WaitReleased(RuntimeError):
    """A wait for a later epoch's FIFO ended by `release_waits`: nothing reads that epoch any more."""


def release_waits() -> None:
    """Ends every wait for a later epoch's FIFO of the channels opened so far in this process.

    Called when training ends: a read-ahead into an epoch that will never be
    fed then fails at once (`WaitReleased`, in a dataset nobody reads any
    more) instead of holding the session's close for the FIFO timeout.
    """
    with _WAITS_LOCK:
        for released in _WAITS:
            released.set()
        _WAITS.clear()


def default_base_dir() -> str:
    """Returns `$SAGEMAKER_BASE_DIR`, or `/opt/ml` when it is unset."""
    return os.environ.get(BASE_DIR_ENV) or DEFAULT_BASE_DIR


def _resolve(base_dir: Optional[str]) -> str:
    return base_dir if base_dir is not None else default_base_dir()


def input_config_dir(base_dir: Optional[str] = None) -> str:
    """Returns `<base_dir>/input/config`."""
    return os.path.join(_resolve(base_dir), INPUT_CONFIG_SUBDIR)


def input_data_config_path(base_dir: Optional[str] = None) -> str:
    """Returns the path of `inputdataconfig.json` under `base_dir`."""
    return os.path.join(input_config_dir(base_dir), INPUT_DATA_CONFIG_FILE)


def pipe_dir(base_dir: Optional[str] = None) -> str:
    """Returns `<base_dir>/input/data`, where the channel FIFOs appear."""
    return os.path.join(_resolve(base_dir), INPUT_DATA_SUBDIR)


def state_dir(base_dir: Optional[str] = None) -> str:
    """Returns `<base_dir>/pipe_state`, where the next FIFO index is kept."""
    return os.path.join(_resolve(base_dir), PIPE_STATE_SUBDIR)


def fifo_path(base_dir: Optional[str], channel: str, epoch: int) -> str:
    """Returns the path of the FIFO of `channel` for pass `epoch`."""
    return os.path.join(pipe_dir(base_dir), "%s_%d" % (channel, epoch))


def state_file_path(state_directory: str, channel: str) -> str:
    """Returns the file in which `PipeModeDataset` keeps `channel`'s next FIFO index."""
    return os.path.join(state_directory, ".%s-pipe_mode-state" % channel)


def broken_stream(error: Exception, channel: str) -> Optional[str]:
    """What to tell a user about `error` when it is a channel's stream breaking, else None.

    `PipeModeDataset` fails with `InternalError: CRC check on header failed`
    (or `on data`) when a FIFO ends inside a record: its writer closed it
    early, or sent damaged bytes. The message names the FIFO the channel
    read last. A FIFO closed exactly between two records only makes its
    epoch shorter, which the reader cannot tell.
    """
    text = str(getattr(error, "message", error))
    if type(error).__name__ != "InternalError" or BROKEN_STREAM_MARK not in text:
        return None
    return ("Pipe-mode channel %r: the stream of FIFO %s broke (%s): its writer closed it inside a record, or "
            "sent damaged bytes" % (channel, _OPENED.get(channel, "(not opened yet)"),
                                    text[text.index(BROKEN_STREAM_MARK):].split(".")[0]))


def read_input_data_config(base_dir: Optional[str] = None) -> Dict[str, dict]:
    """Reads `inputdataconfig.json`: channel name -> channel configuration.

    Raises:
      FileNotFoundError: the file is missing; the message names its path.
      ValueError: the file is not a JSON object of objects.
    """
    path = input_data_config_path(base_dir)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            "Pipe mode needs the SageMaker input data config %s, which does not exist "
            "(base dir %r: set $%s, or emulate a job with `python -m input_pipeline.pipe_feeder`)"
            % (path, _resolve(base_dir), BASE_DIR_ENV))
    with open(path) as f:
        try:
            config = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError("%s is not valid JSON: %s" % (path, e)) from e
    if not isinstance(config, dict) or not all(isinstance(v, dict) for v in config.values()):
        raise ValueError("%s must map channel names to objects, got %r" % (path, config))
    return config


def _is_pipe(channel_config: dict) -> bool:
    return str(channel_config.get(TRAINING_INPUT_MODE_KEY, "")).lower() == PIPE_MODE.lower()


def check_channel(channel: str, base_dir: Optional[str] = None) -> None:
    """Checks that `inputdataconfig.json` has `channel` in Pipe mode.

    Raises:
      FileNotFoundError: no `inputdataconfig.json`.
      ValueError: the channel is not configured, or not in Pipe mode; the
        message lists the configured channels and their modes.
    """
    config = read_input_data_config(base_dir)
    modes = ", ".join("%s (%s)" % (name, c.get(TRAINING_INPUT_MODE_KEY, "no mode"))
                      for name, c in sorted(config.items())) or "none"
    if channel not in config:
        raise ValueError("channel %r is not in %s; configured channels: %s"
                         % (channel, input_data_config_path(base_dir), modes))
    if not _is_pipe(config[channel]):
        raise ValueError("channel %r of %s has %s=%r, not %r; configured channels: %s"
                         % (channel, input_data_config_path(base_dir), TRAINING_INPUT_MODE_KEY,
                            config[channel].get(TRAINING_INPUT_MODE_KEY), PIPE_MODE, modes))


def next_epoch(channel: str, state_directory: str) -> Optional[int]:
    """Returns the index of the FIFO `PipeModeDataset` opens next for `channel`.

    Returns 0 when the state file does not exist yet, and None when it is
    being rewritten (empty or partial); ask again later.
    """
    path = state_file_path(state_directory, channel)
    try:
        with open(path) as f:
            text = f.read().strip()
    except FileNotFoundError:
        return 0
    return int(text) if text.isdigit() else None


def wait_for_fifo(channel: str, base_dir: Optional[str], timeout_s: float,
                  state_directory: Optional[str] = None, released: Optional[threading.Event] = None) -> str:
    """Waits until the FIFO `channel` reads next exists, and returns its path.

    Args:
      channel: channel name.
      base_dir: SageMaker base directory (default: `default_base_dir()`).
      timeout_s: seconds to wait at most.
      state_directory: the `PipeModeDataset` state directory (default:
        `state_dir(base_dir)`).
      released: set by `release_waits`: stop waiting.

    Raises:
      TimeoutError: the FIFO did not appear within `timeout_s`; the message
        names it.
      WaitReleased: `released` was set before the FIFO appeared.
    """
    state_directory = state_directory or state_dir(base_dir)
    deadline = time.monotonic() + timeout_s
    while True:
        epoch = next_epoch(channel, state_directory)
        if epoch is None:
            what = "the next FIFO (state file %s unreadable)" % state_file_path(state_directory, channel)
        else:
            what = fifo_path(base_dir, channel, epoch)
            if os.path.exists(what):
                return what
        if released is not None and released.is_set():
            raise WaitReleased("no longer waiting for Pipe-mode FIFO %s of channel %r: training ended" % (
                what, channel))
        if time.monotonic() >= deadline:
            raise TimeoutError(
                "Pipe-mode FIFO %s of channel %r did not appear within %g s (is the data source "
                "running and feeding this channel?)" % (what, channel, timeout_s))
        time.sleep(FIFO_POLL_INTERVAL_S)


def open_channel(channel: str, base_dir: Optional[str] = None,
                 timeout_s: float = DEFAULT_FIFO_TIMEOUT_S, epochs: Optional[int] = 1,
                 state_directory: Optional[str] = None,
                 data_format: formats.DataFormatLike = formats.TFRECORD) -> "tf.data.Dataset":
    """Returns the serialized records of a Pipe-mode channel.

    Works in eager mode and in graph mode (`tf.compat.v1` sessions and
    `tf.estimator`). Checks the input data config and waits for the first
    FIFO before returning (see the module docstring for how epochs and later
    FIFOs are handled).

    Args:
      channel: channel name, configured in Pipe mode.
      base_dir: SageMaker base directory (default: `default_base_dir()`).
      timeout_s: seconds to wait for each epoch's FIFO to appear.
      epochs: passes to read (each one FIFO), or None to read without end.
      state_directory: where `PipeModeDataset` keeps the next FIFO index
        (default: `<base_dir>/pipe_state`).
      data_format: the format of the channel's records (a format or its
        name); Pipe mode must be able to carry it
        (`DataFormat.pipe_record_format`).

    Returns:
      A `tf.data.Dataset` of scalar `tf.string` elements (shape []), each one
      serialized record. Iterating it raises `tf.errors.UnknownError` naming
      the FIFO when a later epoch's FIFO does not appear within `timeout_s`.

    Raises:
      FileNotFoundError: no `inputdataconfig.json`.
      ValueError: the channel is not configured in Pipe mode, Pipe mode
        cannot carry `data_format`, or `epochs` or `timeout_s` is not
        positive.
      TimeoutError: the first FIFO did not appear within `timeout_s`.
    """
    # Imported here: the feeder side of this module (paths, the input data
    # config) needs no TensorFlow; the `pipe` extra is optional, and importing
    # it loads its op library.
    import tensorflow as tf
    try:
        from sagemaker_tensorflow import PipeModeDataset
    except ImportError as e:
        raise ImportError("Pipe mode needs sagemaker-tensorflow (pip install '.[pipe]'): %s" % e) from e

    data_format = formats.as_format(data_format)
    formats.check_pipe_mode(data_format)
    if epochs is not None and epochs < 1:
        raise ValueError("epochs must be >= 1 or None (without end), got %r" % (epochs,))
    if timeout_s <= 0:
        raise ValueError("timeout_s must be > 0, got %r" % (timeout_s,))
    base_dir = _resolve(base_dir)
    state_directory = state_directory or state_dir(base_dir)
    check_channel(channel, base_dir)
    wait_for_fifo(channel, base_dir, timeout_s, state_directory)
    released = threading.Event()
    with _WAITS_LOCK:
        _WAITS.append(released)

    def wait() -> bool:
        _OPENED[channel] = wait_for_fifo(channel, base_dir, timeout_s, state_directory, released)
        return True

    @tf.autograph.experimental.do_not_convert
    def one_epoch(_):
        waited = tf.numpy_function(wait, [], tf.bool, stateful=True)
        with tf.control_dependencies([waited]):
            return PipeModeDataset(channel, record_format=data_format.pipe_record_format,
                                   state_dir=state_directory, pipe_dir=pipe_dir(base_dir),
                                   config_dir=input_config_dir(base_dir))

    count = REPEAT_FOREVER if epochs is None else epochs
    return tf.data.Dataset.from_tensors(0).repeat(count).flat_map(one_epoch)
