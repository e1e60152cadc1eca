"""The record of the data check: files already read whole, so that a dataset is checked once, not at every start.

`input_pipeline.data_check` reads every row of the input before training;
a start or restart of a run on unchanged files reads none of them again.
For each file it read and found good the record holds:

* its path (relative to the record's directory, next to the data), its size
  and its modification time in nanoseconds: a file whose size or mtime
  differs is read again;
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

Where the record lives. Next to the data: `.data_check.json` in the
dataset's directory (the one holding the `metadata.json` that describes the
file; for files outside a dataset, their own directory). A check is a fact
about the data, not about a run: every run and every model directory on the
same files shares it, and a record beside its files goes wherever the files
are copied with their times (a hard link or `cp -p` keeps it valid; a fresh
download changes the times, and the files are read again). Its name starts
with a dot, so that `input_pipeline.files` never takes it for data. Where
that directory cannot be written (a read-only mount), the record goes to
the model directory (`data_check.json`, absolute paths), and only once the
whole check passed, so that a refused run leaves the model directory as it
was. Both are read.

Several writers. Every process that checks files (Horovod ranks, parameter
server workers, other jobs on the same data) writes its own entries, and
only once its check is done: under an exclusive `flock` of the record's
directory (where the file system offers one) it reads the record again,
adds its entries, and replaces the file atomically (a temporary file, then
`os.replace`). A reader thus sees a whole record, old or new; without the
lock, two writers at the same moment can lose one's entries, which costs a
second reading of those files, never a wrong answer.

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
import json
import os
import uuid
from typing import Dict, List, Mapping, Optional, Tuple

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: writers are not serialized.
    fcntl = None  # type: ignore[assignment]

from absl import logging

from input_pipeline import schema

# The record beside the data (a dot file: `input_pipeline.files` leaves it out) and in the model directory.
RECORD_FILE = ".data_check.json"
MODEL_DIR_RECORD_FILE = "data_check.json"
# Raised whenever what a record's entry means changes: a record of another version is ignored.
VERSION = 1
# A file modified less than this before its check is read again next time (times are kept in ticks).
RACY_WINDOW_NS = 2 * 10**9
# What a record holds of each file's findings: `data_check.Summary`'s fields.
FOUND_FIELDS = ("rows", "min_id", "max_id", "bad_values", "bad_labels")


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
    """The directory whose record holds the file `path`: its dataset's (`schema.find_metadata`), else its own."""
    metadata = schema.find_metadata(path)
    return os.path.dirname(metadata if metadata is not None else os.path.abspath(path))


class CheckRecord:
    """The records a check reads and adds to: one beside each dataset directory, one in the model directory.

    `found` answers from the records as they were when first read; `add`
    keeps new entries in memory; `save` writes them (see the module
    docstring). Not thread-safe: one thread asks and adds.
    """

    def __init__(self, model_dir: Optional[str] = None):
        """A record of files beside their data, and in `model_dir` (None: nowhere) where that cannot be written."""
        self._model_dir = model_dir
        self._read: Dict[str, Dict[str, Entry]] = {}
        self._added: Dict[str, Entry] = {}

    def found(self, path: str, options: Mapping[str, object]) -> Optional[Mapping[str, int]]:
        """What a recorded reading of the file found, if the file is unchanged since and the options the same.

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
        """Writes the entries `add` kept, each into the record beside its data, merged with what that holds now.

        Entries whose record beside the data cannot be written go to the
        model directory's record (only with `model_dir`); a record that
        cannot be written either is warned about, and its files are read
        again at the next check.

        Args:
          model_dir: the model directory's record may be written (False
            when the check refused the input: the model directory stays as
            it was).

        Returns:
          The records written.
        """
        beside: Dict[str, Dict[str, Entry]] = {}
        for path, entry in self._added.items():
            record, key = self._places(path)[0]
            beside.setdefault(record, {})[key] = entry
        written: List[str] = []
        left: Dict[str, Entry] = {}
        for record, entries in sorted(beside.items()):
            try:
                _merge(record, entries)
            except OSError as e:
                logging.info("the data check's record %s cannot be written (%s)", record, e)
                directory = os.path.dirname(record)
                left.update((os.path.join(directory, key), entry) for key, entry in entries.items())
                continue
            logging.info("data check: %d file(s) recorded in %s", len(entries), record)
            written.append(record)
        if left and model_dir and self._model_dir is not None:
            try:
                _merge(self._model_record(), left)
            except OSError as e:
                logging.warning("the data check's record %s was not written (%s): its files are read again at "
                                "the next start", self._model_record(), e)
            else:
                logging.info("data check: %d file(s) recorded in %s", len(left), self._model_record())
                written.append(self._model_record())
                left = {}
        elif left:
            logging.warning("the data check's records of %d file(s) were not written: they are read again at the "
                            "next start", len(left))
        self._added = left
        return written

    def _places(self, path: str) -> List[Tuple[str, str]]:
        """(record, key) pairs that may hold `path`: beside its data (a relative key), in the model directory."""
        directory = record_directory(path)
        places = [(os.path.join(directory, RECORD_FILE), os.path.relpath(os.path.abspath(path), directory))]
        if self._model_dir is not None:
            places.append((self._model_record(), os.path.abspath(path)))
        return places

    def _model_record(self) -> str:
        assert self._model_dir is not None
        return os.path.join(os.path.abspath(self._model_dir), MODEL_DIR_RECORD_FILE)

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


def _merge(record: str, entries: Mapping[str, Entry]) -> None:
    """Adds `entries` to the record file `record` (created where missing): locked, read again, replaced atomically.

    Entries of files that no longer exist are dropped.
    """
    directory = os.path.dirname(record)
    with _locked(directory):
        merged = read(record)
        merged.update(entries)
        for key in [key for key in merged if not os.path.exists(os.path.join(directory, key))]:
            del merged[key]
        text = json.dumps({"version": VERSION,
                           "about": "files the data check (--check_data) read whole, and what it found in each; a "
                                    "file whose size or mtime changes is read again; delete this file to read "
                                    "every file again",
                           "files": {key: merged[key].to_json() for key in sorted(merged)}},
                          indent=1, sort_keys=True)
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

