"""Emulates SageMaker Pipe mode on one machine.

`PipeFeeder` does locally what SageMaker does for Pipe-mode channels:

* merges its channels, in Pipe mode, into
  `<base_dir>/input/config/inputdataconfig.json`;
* for every channel, epoch after epoch, creates the FIFO
  `<base_dir>/input/data/<channel>_<epoch>`, waits for a reader to open it,
  streams the channel's files into it (in the order given, globs expanded
  and sorted), closes it and removes it; the FIFO of epoch `e + 1` is
  created only once epoch `e` is written and closed;
* one thread per channel; it is done when every epoch of every channel is
  written.

A new feeder starts a new emulated job: it resets the `PipeModeDataset`
state of its channels (`<base_dir>/pipe_state`), so readers begin at epoch 0.
`stop()` ends early and cleanly: writers stop, a reader waiting to open a
FIFO gets an empty stream instead of blocking for ever, and every FIFO is
removed. A reader that closes its FIFO before the end of an epoch ends that
epoch (logged); the next epoch follows as usual.

The feeder runs beside a job, in the process that starts it (as SageMaker's
agent does), whose console is the job's own record: its routine lines (started,
each epoch written, an epoch ended early by its reader, a stop by signal) are
absl DEBUG records (`--verbosity 1` shows them); only a channel that fails is
logged at ERROR, since nothing else reports it while the job runs.

Library use::

    with pipe_feeder.PipeFeeder(base_dir, {"train_0": ["a.tfrecord"]}, epochs=3) as feeder:
        ...  # read with input_pipeline.pipe.open_channel("train_0", base_dir, ...)
        feeder.join(timeout=60)

Command line (exits when every epoch is written; SIGTERM or SIGINT stops it
and removes its FIFOs; silent but for errors, `--verbosity 1` logs each epoch)::

    python -m input_pipeline.pipe_feeder --base_dir DIR \\
        --channel train_0=data/train/part-00000.tfrecord \\
        --channel 'train_1=data/train/part-0000[1-9].tfrecord' --epochs 3
"""

import dataclasses
import errno
import glob
import json
import os
import re
import select
import signal
import threading
import time
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from absl import app, flags, logging

from cli import config_flags, entry
from input_pipeline import pipe

PROGRAM = "input_pipeline.pipe_feeder"

# SageMaker's channel-name pattern.
CHANNEL_NAME_PATTERN = re.compile(r"^[A-Za-z0-9._-]+$")
CHANNEL_FLAG_SEPARATOR = "="
FILES_SEPARATOR = ","
DEFAULT_CHUNK_BYTES = 1 << 20
POLL_INTERVAL_S = 0.05
POLL_INTERVAL_MS = int(POLL_INTERVAL_S * 1000)
# Exit status of a process ended by signal N is 128 + N by shell convention.
SIGNAL_EXIT_BASE = 128
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# What SageMaker writes for a Pipe-mode channel besides the mode.
CHANNEL_CONFIG = {
    pipe.TRAINING_INPUT_MODE_KEY: pipe.PIPE_MODE,
    "RecordWrapperType": "None",
    "S3DistributionType": "FullyReplicated",
}


class FeederError(RuntimeError):
    """One or more channels of a `PipeFeeder` failed; the message names them."""


def resolve_files(channel: str, patterns: Sequence[str]) -> List[str]:
    """Expands the files and globs of one channel, in order.

    Args:
      channel: channel name (for error messages).
      patterns: paths or glob patterns; each glob's matches are sorted.

    Returns:
      The absolute paths of the files, in the order given.

    Raises:
      FileNotFoundError: a path does not exist or a glob matches nothing.
      ValueError: no pattern given, or a path is a directory.
    """
    if not patterns:
        raise ValueError("channel %r has no files" % channel)
    files = []
    for pattern in patterns:
        matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        if not matches or not os.path.exists(matches[0]):
            raise FileNotFoundError("channel %r: no file matches %r" % (channel, pattern))
        for path in matches:
            if os.path.isdir(path):
                raise ValueError("channel %r: %r is a directory, not a file" % (channel, path))
            files.append(os.path.abspath(path))
    return files


class PipeFeeder:
    """Feeds Pipe-mode channels through FIFOs, as SageMaker does.

    Attributes:
      base_dir: the emulated SageMaker base directory.
      files: channel name -> absolute paths of its files, in streaming order.
      epochs: passes written through each channel.
    """

    def __init__(self, base_dir: str, channels: Mapping[str, Sequence[str]], epochs: int = 1,
                 chunk_bytes: int = DEFAULT_CHUNK_BYTES):
        """Checks the channels and resolves their files; writes nothing yet.

        Args:
          base_dir: emulated SageMaker base directory (created if missing).
          channels: channel name -> files or glob patterns.
          epochs: passes to write through each channel, >= 1.
          chunk_bytes: bytes read from a file and written at a time.

        Raises:
          ValueError: no channels, a bad channel name, `epochs` < 1 or
            `chunk_bytes` < 1.
          FileNotFoundError: a file is missing; the message names it.
        """
        if not channels:
            raise ValueError("PipeFeeder needs at least one channel")
        for channel in channels:
            if not CHANNEL_NAME_PATTERN.match(channel):
                raise ValueError("bad channel name %r: use letters, digits, '.', '-' and '_'" % channel)
        if epochs < 1:
            raise ValueError("epochs must be >= 1, got %r" % (epochs,))
        if chunk_bytes < 1:
            raise ValueError("chunk_bytes must be >= 1, got %r" % (chunk_bytes,))
        self.base_dir = os.path.abspath(base_dir)
        self.files: Dict[str, List[str]] = {
            channel: resolve_files(channel, patterns) for channel, patterns in channels.items()}
        self.epochs = epochs
        self._chunk_bytes = chunk_bytes
        self._stop = threading.Event()
        self._threads: List[threading.Thread] = []
        self._errors: Dict[str, BaseException] = {}
        self._lock = threading.Lock()
        self._epochs_written: Dict[str, int] = {channel: 0 for channel in channels}

    def fifo(self, channel: str, epoch: int) -> str:
        """Returns the path of the FIFO of `channel` for `epoch`."""
        return pipe.fifo_path(self.base_dir, channel, epoch)

    @property
    def epochs_written(self) -> Dict[str, int]:
        """Channel -> epochs finished so far (written, or ended early by their reader)."""
        with self._lock:
            return dict(self._epochs_written)

    def start(self) -> "PipeFeeder":
        """Writes the config, creates the epoch-0 FIFOs and starts the writers.

        When it returns, the first FIFO of every channel exists.

        Returns:
          self.

        Raises:
          RuntimeError: already started.
          FileExistsError: a FIFO of one of the channels already exists
            (another feeder, or one that was killed); the message names it.
        """
        if self._threads:
            raise RuntimeError("PipeFeeder already started")
        data_dir = pipe.pipe_dir(self.base_dir)
        os.makedirs(data_dir, exist_ok=True)
        os.makedirs(pipe.input_config_dir(self.base_dir), exist_ok=True)
        stale = sorted(os.path.join(data_dir, name) for name in os.listdir(data_dir)
                       if any(re.fullmatch(re.escape(channel) + r"_\d+", name) for channel in self.files))
        if stale:
            raise FileExistsError("FIFOs of these channels already exist (another feeder is running, or "
                                  "one was killed; remove them): %s" % ", ".join(stale))
        self._write_config()
        for channel in self.files:
            state = pipe.state_file_path(pipe.state_dir(self.base_dir), channel)
            if os.path.exists(state):
                os.remove(state)
            os.mkfifo(self.fifo(channel, 0))
        for channel in self.files:
            thread = threading.Thread(target=self._run_channel, args=(channel,),
                                      name="pipe-feeder-%s" % channel, daemon=True)
            self._threads.append(thread)
            thread.start()
        logging.debug("Pipe feeder started under %s: %s, %d epoch(s)", self.base_dir,
                      ", ".join("%s (%d files)" % (c, len(f)) for c, f in self.files.items()), self.epochs)
        return self

    def _write_config(self) -> None:
        path = pipe.input_data_config_path(self.base_dir)
        config = {}
        if os.path.exists(path):
            config = pipe.read_input_data_config(self.base_dir)
        config.update({channel: dict(CHANNEL_CONFIG) for channel in self.files})
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(config, f, indent=1, sort_keys=True)
        os.replace(tmp, path)

    def join(self, timeout: Optional[float] = None) -> bool:
        """Waits for the writers to finish.

        Args:
          timeout: seconds to wait at most; None waits until they finish.

        Returns:
          True when every writer has finished (all epochs written, or
          stopped), False on timeout.

        Raises:
          RuntimeError: not started.
          FeederError: a channel failed.
        """
        if not self._threads:
            raise RuntimeError("PipeFeeder not started")
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in self._threads:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        self._raise_errors()
        return not any(thread.is_alive() for thread in self._threads)

    def _raise_errors(self) -> None:
        with self._lock:
            errors = dict(self._errors)
        if errors:
            raise FeederError("Pipe feeder under %s failed: %s" % (
                self.base_dir, "; ".join("channel %r: %s" % item for item in sorted(errors.items()))))

    def stop(self) -> None:
        """Stops the writers, releases waiting readers and removes the FIFOs.

        Safe to call more than once, and before `start`.
        """
        self._stop.set()
        for thread in self._threads:
            thread.join()
        for channel in self.files:
            for epoch in range(self.epochs):
                release_fifo(self.fifo(channel, epoch))

    def __enter__(self) -> "PipeFeeder":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def _run_channel(self, channel: str) -> None:
        try:
            for epoch in range(self.epochs):
                path = self.fifo(channel, epoch)
                if epoch:
                    os.mkfifo(path)
                try:
                    written = self._write_epoch(channel, path)
                finally:
                    release_fifo(path)
                if written is None:
                    return
                with self._lock:
                    self._epochs_written[channel] = epoch + 1
                logging.debug("Pipe feeder: channel %s epoch %d: %d bytes", channel, epoch, written)
        except Exception as e:
            logging.error("Pipe feeder: channel %s failed: %s", channel, e)
            with self._lock:
                self._errors[channel] = e

    def _write_epoch(self, channel: str, path: str) -> Optional[int]:
        """Streams the channel's files into the FIFO at `path`.

        Returns:
          The bytes written, or None when stopped.
        """
        fd = self._open_for_writing(path)
        if fd is None:
            return None
        written = 0
        try:
            for name in self.files[channel]:
                with open(name, "rb") as source:
                    while True:
                        chunk = source.read(self._chunk_bytes)
                        if not chunk:
                            break
                        sent = self._write_all(fd, chunk)
                        written += sent
                        if sent < len(chunk):
                            if self._stop.is_set():
                                return None
                            logging.debug("Pipe feeder: the reader of %s closed it after %d bytes; "
                                          "epoch ended early", path, written)
                            return written
        finally:
            os.close(fd)
        return written

    def _open_for_writing(self, path: str) -> Optional[int]:
        """Opens the FIFO once a reader has opened it; None when stopped."""
        while not self._stop.is_set():
            try:
                return os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as e:
                if e.errno != errno.ENXIO:  # ENXIO: no reader yet.
                    raise
            self._stop.wait(POLL_INTERVAL_S)
        return None

    def _write_all(self, fd: int, data: bytes) -> int:
        """Writes `data`; returns fewer bytes when stopped or the reader left."""
        view = memoryview(data)
        sent = 0
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        while sent < len(view) and not self._stop.is_set():
            if not poller.poll(POLL_INTERVAL_MS):
                continue
            try:
                sent += os.write(fd, view[sent:])
            except BlockingIOError:
                continue
            except BrokenPipeError:
                break
        return sent


def release_fifo(path: str) -> None:
    """Removes the FIFO at `path`, if any, without leaving a reader blocked.

    A reader blocked opening the FIFO is let through first and reads an empty
    stream; removing the FIFO alone would leave it blocked for ever.
    """
    if not os.path.exists(path):
        return
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    except OSError as e:
        if e.errno != errno.ENXIO:
            raise
    os.remove(path)


def parse_channel_flag(value: str) -> Tuple[str, Tuple[str, ...]]:
    """Parses `NAME=FILE[,FILE...]` (files may be globs).

    Raises:
      ValueError: no `=`, an empty name, or no files; the message echoes the value.
    """
    name, sep, files = value.partition(CHANNEL_FLAG_SEPARATOR)
    patterns = tuple(f for f in files.split(FILES_SEPARATOR) if f)
    if not sep or not name or not patterns:
        raise ValueError("--channel must be NAME=FILE[,FILE...], got %r" % value)
    return name, patterns


@dataclasses.dataclass(frozen=True)
class FeederConfig:
    """What the command line asks for (its flags).

    Attributes:
      base_dir: emulated SageMaker base directory.
      channel: `NAME=FILE[,FILE...]` per channel (files may be globs).
      epochs: passes to write through each channel.
    """

    base_dir: str = dataclasses.field(metadata=config_flags.metadata(
        "Emulated SageMaker base directory (the role of /opt/ml)."))
    channel: Tuple[str, ...] = dataclasses.field(metadata=config_flags.metadata(
        "NAME=FILE[,FILE...] (globs allowed); repeat for more channels.", repeated=True))
    epochs: int = config_flags.field(1, "Passes written through each channel.")

    def __post_init__(self):
        if self.epochs < 1:
            raise ValueError("--epochs=%r: at least one pass is written through each channel" % self.epochs)
        names = [name for name, _ in self.channels]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError("--channel repeats channel(s) %s" % ", ".join(repeated))

    @property
    def channels(self) -> Tuple[Tuple[str, Tuple[str, ...]], ...]:
        """(channel name, files or globs) pairs.

        Raises:
          ValueError: a malformed `--channel`, echoed.
        """
        return tuple(parse_channel_flag(value) for value in self.channel)


def define_flags() -> None:
    """Defines the command-line flags of this tool."""
    config_flags.define_flags([FeederConfig])
    flags.mark_flags_as_required(config_flags.required_flags([FeederConfig]))


def config_from_flags(flag_values: flags.FlagValues) -> FeederConfig:
    """Builds the config from parsed flags.

    Raises:
      app.UsageError: a malformed or repeated `--channel`, or a bad `--epochs`.
    """
    try:
        return FeederConfig(**config_flags.values(FeederConfig, flag_values))
    except ValueError as e:
        raise app.UsageError(str(e)) from e


def feed(config: FeederConfig) -> int:
    """Feeds every epoch of every channel; SIGTERM/SIGINT stop early.

    Returns:
      0 when every epoch was written, 128 + N when stopped by signal N.
    """
    feeder = PipeFeeder(config.base_dir, dict(config.channels), config.epochs)
    received = []
    previous = {signum: signal.signal(signum, lambda signum, _: received.append(signum))
                for signum in STOP_SIGNALS}
    try:
        with feeder:
            while not feeder.join(timeout=POLL_INTERVAL_S):
                if received:
                    logging.debug("Pipe feeder: signal %d, stopping", received[0])
                    return SIGNAL_EXIT_BASE + received[0]
        return 0
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def main(argv: Sequence[str]) -> int:
    """Runs the feeder with the parsed flags."""
    if len(argv) > 1:
        raise app.UsageError("unexpected arguments: %s" % " ".join(argv[1:]))
    config = config_from_flags(flags.FLAGS)
    try:
        return feed(config)
    except (ValueError, OSError, FeederError) as e:
        raise SystemExit("error: %s" % e) from e


def run() -> None:
    """Console entry point."""
    entry.run(main, PROGRAM, define_flags, entry.NO_TENSORFLOW)


if __name__ == "__main__":
    run()
