"""The record of the data check: files already read whole, so that a dataset is checked once, not at every start.

`input_pipeline.data_check` reads every row of the input before training;
a start or restart of a run on unchanged files reads none of them again.
For each file it read and found good the record holds:

* its path (relative to its dataset's directory), its size and its
  modification time in nanoseconds: a file whose size or mtime differs is
  read again;
* the options the reading depended on (`data_check.record_options`: the
  format, `field_size`, the format's options `skip_bad_records` and
  `max_corrupted_records`): a file recorded under other options is read
  again;
* what the reading found (rows, the id range, values and labels that are
  not finite).

What a file is judged against besides its own bytes (`feature_size`, the
row counts of the dataset's `metadata.json`) is not part of the match: every
check judges each file again from what was found in it, so a changed
`--feature_size` or metadata is judged at once, without reading a row, and
a file it makes bad is then read again to name the row.

Where the record lives. A file's dataset directory is the one holding the
`metadata.json` that describes it (for files outside a dataset, their own
directory). Its record is written into one of two places:

* beside the data, `RECORD_FILE` (`.data_check.json`) in the dataset's
  directory: a check is a fact about the data, so every run and every model
  directory on the same files shares it, and it goes wherever the files are
  copied with their times (a hard link or `cp -p` keeps it valid; a fresh
  download changes the times, and the files are read again). Its name starts
  with a dot, so that `input_pipeline.files` never takes it for data;
* in the model directory, `data_check-<identity>.json`, the identity a hash
  of the dataset directory's resolved path (`model_dir_record_name`), so
  that a model directory trained on several datasets keeps one record of
  each. It is written only once the whole check passed, so that a refused
  run leaves the model directory as it was; a restart of the run on the same
  model directory reads no row of unchanged files.

A job writes only into folders it owns: a dataset directory is written only
where all of these hold (`not_beside`), else its record goes to the model
directory:

* the run asks for it (`PLACES`: `auto`, the default; `model_dir` writes
  every record into the model directory, e.g. for a dataset a team shares
  whose directory other users checksum, or for two jobs with other options
  on one dataset);
* the directory is not in a SageMaker input channel: not under a channel's
  directory (an `SM_CHANNEL_*` variable) nor under the input data directory
  (`input/data` under `$SAGEMAKER_BASE_DIR`, default `/opt/ml`; SageMaker
  mounts a FastFile-mode channel read-only, and a job's channels are its
  inputs, not its outputs);
* this process may write it (`os.access`: a read-only mount, a Kubernetes
  read-only volume, a folder without write permission);
* it belongs to this process's user (a folder of another user, such as a
  team's shared dataset, is theirs).

A dataset directory that passes these and still cannot be written (a file
system that refuses the write) has its record go to the model directory
too. Both places are read: a record beside the data, such as one a dataset
prepared once carries with it, spares its files in any run, and is never
required.

Several writers. Every process that checks files (Horovod ranks, parameter
server workers, other jobs on the same data) writes its own entries, and
only once its check is done: under an exclusive `flock` of the record's
directory (where the file system offers one) it reads the record again,
adds its entries, and replaces the file atomically (a temporary file of a
name of its own, then `os.replace`). A reader thus sees a whole record, old
or new; without the lock, two writers at the same moment can lose one's
entries, which costs a second reading of those files, never a wrong answer.
A record beside the data drops the entries of files no longer there; one in
the model directory keeps them, as hosts that share a model directory each
see their own files under one channel path (`ShardedByS3Key`).

Trust. A record that cannot be read or parsed, of another `VERSION`, or an
entry of another shape is ignored (the files are read again), never an
error. A file modified less than `RACY_WINDOW_NS` before it was read is not
recorded: file systems keep times in ticks (1 ns to 2 s), and a file
rewritten with the same size within the tick of its check would otherwise
match. A file changed while keeping its size and mtime (`os.utime`) is not
read again: delete the record to check every file again.
"""

import dataclasses
import datetime
import errno
import hashlib
import json
import os
import uuid
from typing import Dict, List, Mapping, Optional, Tuple

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: writers are not serialized.
    fcntl = None  # type: ignore[assignment]

from absl import logging

from input_pipeline import pipe, schema

# The record beside the data (a dot file: `input_pipeline.files` leaves it out).
RECORD_FILE = ".data_check.json"
# The record in the model directory of the dataset directory whose identity (`model_dir_record_name`) it holds.
MODEL_DIR_RECORD_FILE = "data_check-%s.json"
# Hex digits of the SHA-256 of a dataset directory's resolved path that name its record in a model directory.
IDENTITY_DIGITS = 16
# Where the records are written (`TrainConfig.data_check_record`): beside the data where the job owns the
# folder, else in the model directory; or always in the model directory.
PLACES = ("auto", "model_dir")
AUTO, MODEL_DIR = PLACES
# A SageMaker container names each input channel's directory in `SM_CHANNEL_<NAME>`.
SAGEMAKER_CHANNEL_PREFIX = "SM_CHANNEL_"
# Raised whenever what a record's entry means changes: a record of another version is ignored.
VERSION = 1
# A file modified less than this before its check is read again next time (times are kept in ticks).
RACY_WINDOW_NS = 2 * 10**9
# What a record holds of each file's findings: `data_check.Summary`'s fields.
FOUND_FIELDS = ("rows", "min_id", "max_id", "bad_values", "bad_labels")
ABOUT = ("files the data check (--check_data) read whole, and what it found in each; a file whose size or mtime "
         "changes is read again; delete this file to read every file again")


@dataclasses.dataclass(frozen=True)
class FileState:
    """What tells a file's bytes apart without reading them.

    Attributes:
      size: its size in bytes.
      mtime_ns: its modification time in nanoseconds since the epoch.
    """

    size: int
    mtime_ns: int

    @classmethod
    def of(cls, path: str) -> "FileState":
        """The state of the file at `path` now (`os.stat`)."""
        stat = os.stat(path)
        return cls(stat.st_size, stat.st_mtime_ns)


@dataclasses.dataclass(frozen=True)
class Entry:
    """One file of a record: its state, the options it was read with, and what was found.

    Attributes:
      state: the file's size and mtime when it was read.
      options: the options the reading depended on (JSON values).
      found: `FOUND_FIELDS` -> their values.
      checked_at: when it was read (UTC, ISO 8601), for people.
    """

    state: FileState
    options: Mapping[str, object]
    found: Mapping[str, int]
    checked_at: str

    def to_json(self) -> dict:
        return {"size": self.state.size, "mtime_ns": self.state.mtime_ns, "options": dict(self.options),
                "found": dict(self.found), "checked_at": self.checked_at}

    @classmethod
    def from_json(cls, value) -> Optional["Entry"]:
        """The entry `value` holds, or None when it has another shape."""
        if not isinstance(value, dict):
            return None
        size, mtime_ns, options, found = (value.get(key) for key in ("size", "mtime_ns", "options", "found"))
        if not (isinstance(size, int) and isinstance(mtime_ns, int) and isinstance(options, dict)
                and isinstance(found, dict) and set(found) == set(FOUND_FIELDS)
                and not any(isinstance(v, bool) or not isinstance(v, int) for v in (size, mtime_ns, *found.values()))):
            return None
        return cls(FileState(size, mtime_ns), options, found, str(value.get("checked_at", "")))


def record_directory(path: str) -> str:
    """The dataset directory of the file `path`: its dataset's (`schema.find_metadata`), else its own."""
    metadata = schema.find_metadata(path)
    return os.path.dirname(metadata if metadata is not None else os.path.abspath(path))


def model_dir_record_name(directory: str) -> str:
    """The name of the record of the dataset directory `directory` in a model directory (`MODEL_DIR_RECORD_FILE`).

    Named by a hash of the directory's resolved path: the same dataset
    reached through another link has the same record.
    """
    identity = hashlib.sha256(os.fsencode(os.path.realpath(directory))).hexdigest()[:IDENTITY_DIGITS]
    return MODEL_DIR_RECORD_FILE % identity


def sagemaker_input_dirs(environ: Mapping[str, str]) -> List[str]:
    """The directories of a SageMaker job's input channels: the input data directory and each `SM_CHANNEL_*`."""
    base_dir = environ.get(pipe.BASE_DIR_ENV) or pipe.DEFAULT_BASE_DIR
    channels = [value for key, value in sorted(environ.items()) if key.startswith(SAGEMAKER_CHANNEL_PREFIX) and value]
    return [pipe.pipe_dir(base_dir)] + channels


def not_beside(directory: str, place: str = AUTO, environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """Why the record of the dataset directory `directory` is not written into it; None where it is.

    See the module docstring: not with `place` `MODEL_DIR`, not in a
    SageMaker input channel, not where this process may not write, not in a
    directory of another user.

    Args:
      directory: the dataset directory (`record_directory`).
      place: one of `PLACES`.
      environ: the process's environment (default `os.environ`): its
        SageMaker channels.

    Returns:
      The reason in words, or None.
    """
    if place == MODEL_DIR:
        return "the run asks for the model directory (data_check_record %r)" % MODEL_DIR
    resolved = os.path.realpath(directory)
    for root in sagemaker_input_dirs(os.environ if environ is None else environ):
        root = os.path.realpath(root)
        if resolved == root or resolved.startswith(root.rstrip(os.sep) + os.sep):
            return "it is in the SageMaker input channels' directory %s (a job's input, not its output)" % root
    if not os.access(resolved, os.W_OK | os.X_OK):
        return "this process may not write it (a read-only mount, or no write permission)"
    geteuid = getattr(os, "geteuid", None)
    if geteuid is not None:
        try:
            owner = os.stat(resolved).st_uid
        except OSError as e:
            return "it cannot be examined (%s)" % e
        if owner != geteuid():
            return "it belongs to user id %d, and this process runs as user id %d" % (owner, geteuid())
    return None


class CheckRecord:
    """The records a check reads and adds to: one beside each dataset directory, one for each in the model directory.

    `found` answers from the records as they were when first read; `add`
    keeps new entries in memory; `save` writes them, each dataset's into the
    place `not_beside` chooses (see the module docstring). Not thread-safe:
    one thread asks and adds.
    """

    def __init__(self, model_dir: Optional[str] = None, place: str = AUTO,
                 environ: Optional[Mapping[str, str]] = None):
        """A record of checked files.

        Args:
          model_dir: the run's model directory; None: records are written
            beside the data only.
          place: one of `PLACES`: `AUTO` writes beside the data where this
            job owns the dataset directory (`not_beside`), `MODEL_DIR`
            always into the model directory.
          environ: the process's environment (default `os.environ`): its
            SageMaker channels are never written.

        Raises:
          ValueError: `place` is not one of `PLACES`.
        """
        if place not in PLACES:
            raise ValueError("the data check's record goes to one of %s, got %r: pick one of them"
                             % (", ".join(PLACES), place))
        self._model_dir = model_dir
        self._place = place
        self._environ = dict(os.environ if environ is None else environ)
        self._read: Dict[str, Dict[str, Entry]] = {}
        self._added: Dict[str, Entry] = {}
        self._not_beside: Dict[str, Optional[str]] = {}

    def found(self, path: str, options: Mapping[str, object]) -> Optional[Mapping[str, int]]:
        """What a recorded reading of the file found, if the file is unchanged since and the options the same.

        Both places are read: beside the data, and the model directory.

        Args:
          path: the file.
          options: the options it is checked with now.

        Returns:
          `FOUND_FIELDS` -> values; None when the file must be read.
        """
        try:
            state = FileState.of(path)
        except OSError:
            return None  # Reading the file names the problem.
        for record, key in self._places(path):
            entry = self._entries(record).get(key)
            if entry is not None and entry.state == state and entry.options == dict(options):
                return entry.found
        return None

    def add(self, path: str, state: FileState, options: Mapping[str, object], found: Mapping[str, int],
            read_from_ns: int) -> bool:
        """Keeps what a reading of `path` found, to be written by `save`.

        Args:
          path: the file.
          state: its state before it was read (a file changed while it was
            read then differs from its entry, and is read again).
          options: the options it was read with.
          found: `FOUND_FIELDS` -> values.
          read_from_ns: when its reading started (`time.time_ns()`).

        Returns:
          Whether it was kept: not when it was modified less than
          `RACY_WINDOW_NS` before its reading started.
        """
        if state.mtime_ns > read_from_ns - RACY_WINDOW_NS:
            return False
        checked_at = datetime.datetime.fromtimestamp(read_from_ns / 1e9, datetime.timezone.utc)
        kept = {name: int(found[name]) for name in FOUND_FIELDS}
        self._added[os.path.abspath(path)] = Entry(state, dict(options), kept, checked_at.isoformat(timespec="seconds"))
        return True

    def save(self, model_dir: bool = True) -> List[str]:
        """Writes the entries `add` kept, merged with what their records hold now.

        Each dataset directory's entries go beside the data where
        `not_beside` allows it and the write succeeds; else to its record in
        the model directory (only with `model_dir`). Entries not written are
        kept for a later `save`, and their files are read again at the next
        check.

        Args:
          model_dir: the model directory's records may be written (False
            when the check refused the input: the model directory stays as
            it was).

        Returns:
          The records written.
        """
        by_directory: Dict[str, Dict[str, Entry]] = {}
        for path, entry in self._added.items():
            directory = record_directory(path)
            by_directory.setdefault(directory, {})[os.path.relpath(path, directory)] = entry
        written: List[str] = []
        left: Dict[str, Entry] = {}
        for directory, entries in sorted(by_directory.items()):
            record = self._write(directory, entries, model_dir)
            if record is None:
                left.update((os.path.join(directory, key), entry) for key, entry in entries.items())
            else:
                written.append(record)
        self._added = left
        return written

    def model_dir_record(self, directory: str) -> Optional[str]:
        """The record of the dataset directory `directory` in the model directory; None without one."""
        if self._model_dir is None:
            return None
        return os.path.join(os.path.abspath(self._model_dir), model_dir_record_name(directory))

    def _write(self, directory: str, entries: Mapping[str, Entry], model_dir: bool) -> Optional[str]:
        """Writes one dataset directory's entries; returns the record written (None: none was)."""
        reason = self._why_not_beside(directory)
        if reason is None:
            beside = os.path.join(directory, RECORD_FILE)
            try:
                _merge(beside, directory, entries)
            except OSError as e:
                reason = "it cannot be written (%s)" % e
            else:
                logging.info("data check: %d file(s) recorded in %s", len(entries), beside)
                return beside
        record = self.model_dir_record(directory)
        if record is None:
            logging.warning("the data check's record of %d file(s) of %s was not written: not beside the data (%s), "
                            "and there is no model directory; they are read again at the next start",
                            len(entries), directory, reason)
            return None
        if not model_dir:
            logging.info("data check: the record of %d file(s) of %s was not written: not beside the data (%s), and "
                         "the model directory is left as it was (the check refused the input)",
                         len(entries), directory, reason)
            return None
        try:
            _merge(record, directory, entries, in_model_dir=True)
        except OSError as e:
            logging.warning("the data check's record %s was not written (%s): its files are read again at the next "
                            "start", record, e)
            return None
        logging.info("data check: %d file(s) of %s recorded in %s, not beside the data: %s", len(entries),
                     directory, record, reason)
        return record

    def _why_not_beside(self, directory: str) -> Optional[str]:
        if directory not in self._not_beside:
            self._not_beside[directory] = not_beside(directory, self._place, self._environ)
        return self._not_beside[directory]

    def _places(self, path: str) -> List[Tuple[str, str]]:
        """(record, key) pairs that may hold `path`: beside its data, in the model directory (the same key)."""
        directory = record_directory(path)
        key = os.path.relpath(os.path.abspath(path), directory)
        places = [(os.path.join(directory, RECORD_FILE), key)]
        model_record = self.model_dir_record(directory)
        if model_record is not None:
            places.append((model_record, key))
        return places

    def _entries(self, record: str) -> Dict[str, Entry]:
        if record not in self._read:
            self._read[record] = read(record)
        return self._read[record]


def read(record: str) -> Dict[str, Entry]:
    """The entries of the record file `record`, by key; none when it is missing, unreadable or of another version.

    An entry of another shape is left out. A record that exists and cannot be
    used is warned about; it is never an error.
    """
    try:
        with open(record) as f:
            value = json.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        logging.warning("ignoring the data check's record %s (%s): its files are read again", record, e)
        return {}
    if not isinstance(value, dict) or value.get("version") != VERSION or not isinstance(value.get("files"), dict):
        logging.warning("ignoring the data check's record %s: not a record of version %d; its files are read again",
                        record, VERSION)
        return {}
    entries = {}
    for key, raw in value["files"].items():
        entry = Entry.from_json(raw)
        if entry is not None:
            entries[key] = entry
    return entries


def _merge(record: str, directory: str, entries: Mapping[str, Entry], in_model_dir: bool = False) -> None:
    """Adds `entries` to the record file `record` (created where missing): locked, read again, replaced atomically.

    Args:
      record: the record file; its directory is locked while it is written.
      directory: the dataset directory the entries' keys are relative to;
        beside the data, entries of files that no longer exist there are
        dropped.
      entries: key -> entry.
      in_model_dir: the record is in a model directory: it names its
        dataset directory, for people, and keeps every entry (hosts that
        share a model directory each see their own files under one channel
        path, e.g. `ShardedByS3Key`).
    """
    with _locked(os.path.dirname(record)):
        merged = read(record)
        merged.update(entries)
        if not in_model_dir:
            for key in [key for key in merged if not os.path.exists(os.path.join(directory, key))]:
                del merged[key]
        value: Dict[str, object] = {"version": VERSION, "about": ABOUT}
        if in_model_dir:
            value["dataset_directory"] = os.path.realpath(directory)
        value["files"] = {key: merged[key].to_json() for key in sorted(merged)}
        text = json.dumps(value, indent=1, sort_keys=True)
        # A name of this writer's own: writers on a file system without `flock` never share a temporary file.
        tmp = "%s.%d.%s.tmp" % (record, os.getpid(), uuid.uuid4().hex[:8])
        try:
            with open(tmp, "w") as f:
                f.write(text)
            os.replace(tmp, record)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)


class _locked:
    """An exclusive `flock` of a directory while the block runs, where the file system offers one."""

    def __init__(self, directory: str):
        self._directory = directory
        self._fd: Optional[int] = None

    def __enter__(self):
        if fcntl is None:
            return self
        try:
            self._fd = os.open(self._directory, os.O_RDONLY)
            fcntl.flock(self._fd, fcntl.LOCK_EX)
        except OSError as e:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            if e.errno not in (errno.EBADF, errno.EINVAL, errno.ENOLCK, errno.EOPNOTSUPP):
                raise
        return self

    def __exit__(self, *exc):
        if self._fd is not None:
            os.close(self._fd)  # Closing the descriptor releases the lock.
            self._fd = None
        return False
