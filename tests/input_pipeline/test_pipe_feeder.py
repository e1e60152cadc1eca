"""Tests of `input_pipeline.pipe_feeder`: real FIFOs, real readers.

The byte-level tests read the FIFOs with plain `open()`, independently of
the feeder; the command-line tests run the feeder as a subprocess and read
it with the real `PipeModeDataset` (`input_pipeline.pipe.open_channel`).
"""

import json
import os
import signal
import subprocess
import tempfile
import threading
import time
from typing import Dict, List, Sequence, Tuple

import pytest
import tensorflow as tf
from absl import logging as absl_logging

from input_pipeline import pipe, pipe_feeder, schema
from tests import command_line

# Larger than a Linux pipe's buffer (64 KiB), so a writer cannot finish an
# epoch before its reader has read most of it.
BIG_FILE_BYTES = 200 * 1024
WAIT_S = 30.0
# Time for a reader thread to reach its blocking open() of a FIFO.
BLOCKED_READER_S = 0.3
POLL_S = 0.02
PROCESS_TIMEOUT_S = 60.0

# Reads one channel with `pipe.open_channel` and prints the example ids as JSON.
READER_SCRIPT = """
import json, sys, time
import tensorflow as tf
from input_pipeline import pipe, schema
base_dir, channel, epochs, timeout_s = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
start = time.monotonic()
ids = [tf.train.Example.FromString(record).features.feature[schema.IDS_KEY].int64_list.value[0]
       for record in pipe.open_channel(channel, base_dir, timeout_s, epochs=epochs).as_numpy_iterator()]
print(json.dumps({"ids": ids, "seconds": time.monotonic() - start}))
"""


def write_examples(path: str, ids: Sequence[int]) -> str:
    """Writes one `tf.train.Example` per id (the id in every `ids` slot); returns `path`."""
    with tf.io.TFRecordWriter(path) as writer:
        for example_id in ids:
            example = tf.train.Example(features=tf.train.Features(feature={
                schema.LABEL_KEY: tf.train.Feature(float_list=tf.train.FloatList(value=[example_id % 2])),
                schema.IDS_KEY: tf.train.Feature(
                    int64_list=tf.train.Int64List(value=[example_id] * schema.FIELD_SIZE)),
                schema.VALUES_KEY: tf.train.Feature(
                    float_list=tf.train.FloatList(value=[1.0] * schema.FIELD_SIZE)),
            }))
            writer.write(example.SerializeToString())
    return path


def example_ids(records) -> List[int]:
    """Returns the id of each serialized example written by `write_examples`."""
    return [tf.train.Example.FromString(record).features.feature[schema.IDS_KEY].int64_list.value[0]
            for record in records]


def started_feeder(test_case: tf.test.TestCase, base_dir: str, channels: Dict[str, List[str]],
                   epochs: int) -> pipe_feeder.PipeFeeder:
    """Starts a feeder that is stopped (FIFOs removed) when the test ends."""
    feeder = pipe_feeder.PipeFeeder(base_dir, channels, epochs)
    test_case.addCleanup(feeder.stop)
    return feeder.start()


def start_process(test_case: tf.test.TestCase, args: Sequence[str]) -> subprocess.Popen:
    """Starts `python args...` as a user would (`tests.command_line`); killed, if still running, when the test ends."""
    process = command_line.start(["python"] + list(args), test_case.get_temp_dir(), stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)

    def cleanup():
        command_line.kill_group(process)
        process.communicate()

    test_case.addCleanup(cleanup)
    return process


def start_reader(test_case: tf.test.TestCase, base_dir: str, channel: str, epochs: int,
                 timeout_s: float = WAIT_S) -> subprocess.Popen:
    """Starts a subprocess reading `channel` with `pipe.open_channel`."""
    return start_process(test_case, ["-c", READER_SCRIPT, base_dir, channel, str(epochs), str(timeout_s)])


def reader_output(process: subprocess.Popen) -> dict:
    """Waits for a reader subprocess and returns its JSON output."""
    out, err = process.communicate(timeout=PROCESS_TIMEOUT_S)
    if process.returncode:
        raise AssertionError("reader failed with status %d:\n%s" % (process.returncode, err[-3000:]))
    return json.loads(out.strip().splitlines()[-1])


def wait_until(predicate, what: str, timeout_s: float = WAIT_S) -> None:
    """Polls `predicate` until it holds; fails the test after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %g s waiting for %s" % (timeout_s, what))
        time.sleep(POLL_S)


def fifos_in(base_dir: str) -> List[str]:
    """Names of the entries of the channel directory under `base_dir`."""
    data_dir = pipe.pipe_dir(base_dir)
    return sorted(os.listdir(data_dir)) if os.path.isdir(data_dir) else []


class PipeFeederTest(tf.test.TestCase):

    def setUp(self):
        super().setUp()
        self.data_dir = tempfile.mkdtemp(dir=self.get_temp_dir())
        self.base_dir = os.path.join(tempfile.mkdtemp(dir=self.get_temp_dir()), "ml")

    def write_bytes(self, name: str, size: int, seed: int) -> str:
        path = os.path.join(self.data_dir, name)
        with open(path, "wb") as f:
            f.write(bytes((seed + i * 7) % 251 for i in range(size)))
        return path

    def read_fifo(self, channel: str, epoch: int, limit: int = -1) -> Tuple[bytes, bool]:
        """Opens the FIFO of an epoch once it exists and reads up to `limit` bytes.

        Returns:
          The bytes read, and whether the next epoch's FIFO existed once this
          one was open, before reading.
        """
        path = pipe.fifo_path(self.base_dir, channel, epoch)
        wait_until(lambda: os.path.exists(path), path)
        with open(path, "rb") as f:
            next_existed = os.path.exists(pipe.fifo_path(self.base_dir, channel, epoch + 1))
            return f.read(limit), next_existed

    def test_streams_every_epoch_of_every_channel_and_removes_fifos(self):
        a0 = self.write_bytes("a-0.bin", BIG_FILE_BYTES, seed=1)
        a1 = self.write_bytes("a-1.bin", BIG_FILE_BYTES // 3, seed=2)
        b0 = self.write_bytes("b-0.bin", BIG_FILE_BYTES, seed=3)
        epochs = 3
        feeder = started_feeder(self, self.base_dir, {"a": [os.path.join(self.data_dir, "a-*.bin")],
                                                      "b": [b0]}, epochs)
        self.assertEqual(feeder.files, {"a": [a0, a1], "b": [b0]})
        with open(pipe.input_data_config_path(self.base_dir)) as f:
            config = json.load(f)
        self.assertEqual(config, {"a": pipe_feeder.CHANNEL_CONFIG, "b": pipe_feeder.CHANNEL_CONFIG})

        expected = {"a": open(a0, "rb").read() + open(a1, "rb").read(), "b": open(b0, "rb").read()}
        received = {channel: [] for channel in expected}

        def read_all(channel):
            for epoch in range(epochs):
                received[channel].append(self.read_fifo(channel, epoch))

        readers = [threading.Thread(target=read_all, args=(c,), daemon=True) for c in expected]
        for reader in readers:
            reader.start()
        self.assertTrue(feeder.join(timeout=WAIT_S))
        for reader in readers:
            reader.join(WAIT_S)
        for channel, data in expected.items():
            self.assertEqual(len(received[channel]), epochs, channel)
            for epoch, (got, next_existed) in enumerate(received[channel]):
                self.assertEqual(got, data, "channel %s epoch %d" % (channel, epoch))
                self.assertFalse(next_existed, "channel %s: FIFO of epoch %d created before epoch %d "
                                 "was closed" % (channel, epoch + 1, epoch))
        self.assertEqual(feeder.epochs_written, {"a": epochs, "b": epochs})
        self.assertEqual(fifos_in(self.base_dir), [])

    def test_missing_file_is_named_and_nothing_is_written(self):
        present = self.write_bytes("present.bin", 10, seed=0)
        missing = os.path.join(self.data_dir, "missing.tfrecord")
        with self.assertRaisesRegex(FileNotFoundError, "channel 'train_1'.*missing.tfrecord"):
            pipe_feeder.PipeFeeder(self.base_dir, {"train_0": [present], "train_1": [missing]})
        with self.assertRaisesRegex(FileNotFoundError, r"nothing-\*.bin"):
            pipe_feeder.PipeFeeder(self.base_dir, {"train_0": [os.path.join(self.data_dir, "nothing-*.bin")]})
        with self.assertRaisesRegex(ValueError, "is a directory"):
            pipe_feeder.PipeFeeder(self.base_dir, {"train_0": [self.data_dir]})
        self.assertFalse(os.path.exists(self.base_dir))

    def test_bad_arguments(self):
        path = self.write_bytes("x.bin", 10, seed=0)
        with self.assertRaisesRegex(ValueError, "at least one channel"):
            pipe_feeder.PipeFeeder(self.base_dir, {})
        with self.assertRaisesRegex(ValueError, "'a/b'"):
            pipe_feeder.PipeFeeder(self.base_dir, {"a/b": [path]})
        with self.assertRaisesRegex(ValueError, "epochs must be >= 1, got 0"):
            pipe_feeder.PipeFeeder(self.base_dir, {"a": [path]}, epochs=0)
        with self.assertRaisesRegex(ValueError, "has no files"):
            pipe_feeder.PipeFeeder(self.base_dir, {"a": []})
        with self.assertRaisesRegex(RuntimeError, "not started"):
            pipe_feeder.PipeFeeder(self.base_dir, {"a": [path]}).join()

    def test_fifo_left_over_is_refused(self):
        path = self.write_bytes("x.bin", 10, seed=0)
        os.makedirs(pipe.pipe_dir(self.base_dir))
        stale = pipe.fifo_path(self.base_dir, "a", 4)
        os.mkfifo(stale)
        with self.assertRaisesRegex(FileExistsError, stale):
            pipe_feeder.PipeFeeder(self.base_dir, {"a": [path]}).start()
        self.assertEqual(fifos_in(self.base_dir), ["a_4"])

    def test_config_keeps_other_channels_and_pipe_state_is_reset(self):
        path = self.write_bytes("x.bin", 10, seed=0)
        os.makedirs(pipe.input_config_dir(self.base_dir))
        validation = {"TrainingInputMode": "File"}
        with open(pipe.input_data_config_path(self.base_dir), "w") as f:
            json.dump({"validation": validation}, f)
        os.makedirs(pipe.state_dir(self.base_dir))
        with open(pipe.state_file_path(pipe.state_dir(self.base_dir), "a"), "w") as f:
            f.write("7")
        started_feeder(self, self.base_dir, {"a": [path]}, epochs=1)
        self.assertEqual(pipe.read_input_data_config(self.base_dir),
                         {"a": pipe_feeder.CHANNEL_CONFIG, "validation": validation})
        self.assertEqual(pipe.next_epoch("a", pipe.state_dir(self.base_dir)), 0)
        self.assertTrue(os.path.exists(pipe.fifo_path(self.base_dir, "a", 0)))

    def test_reader_closing_early_ends_only_that_epoch(self):
        path = self.write_bytes("x.bin", BIG_FILE_BYTES, seed=5)
        feeder = started_feeder(self, self.base_dir, {"a": [path]}, epochs=2)
        partial, _ = self.read_fifo("a", 0, limit=100)
        self.assertLen(partial, 100)
        self.assertEqual(self.read_fifo("a", 1), (open(path, "rb").read(), False))
        self.assertTrue(feeder.join(timeout=WAIT_S))
        self.assertEqual(feeder.epochs_written, {"a": 2})

    def test_routine_lines_are_debug_records_and_a_failure_an_error(self):
        # The feeder runs beside a job whose console is the job's own record: its
        # routine lines appear with --verbosity 1 only.
        path = self.write_bytes("x.bin", BIG_FILE_BYTES, seed=7)
        with self.assertLogs(absl_logging.get_absl_logger(), level="DEBUG") as logs:
            feeder = started_feeder(self, self.base_dir, {"a": [path]}, epochs=2)
            self.read_fifo("a", 0, limit=100)
            self.read_fifo("a", 1)
            self.assertTrue(feeder.join(timeout=WAIT_S))
        routine = [(record.levelname, record.getMessage()) for record in logs.records]
        self.assertEqual({"DEBUG"}, {level for level, _ in routine}, routine)
        messages = "\n".join(message for _, message in routine)
        self.assertIn("Pipe feeder started under %s: a (1 files), 2 epoch(s)" % os.path.abspath(self.base_dir),
                      messages)
        self.assertRegex(messages, r"the reader of .*a_0 closed it after \d+ bytes; epoch ended early")
        self.assertIn("Pipe feeder: channel a epoch 1: %d bytes" % BIG_FILE_BYTES, messages)

        with self.assertLogs(absl_logging.get_absl_logger(), level="DEBUG") as logs:
            feeder = started_feeder(self, self.base_dir, {"a": [path]}, epochs=1)
            os.remove(path)
            self.read_fifo("a", 0)
            with self.assertRaises(pipe_feeder.FeederError):
                feeder.join(timeout=WAIT_S)
        failures = [record for record in logs.records if record.levelname != "DEBUG"]
        self.assertEqual(["ERROR"], [record.levelname for record in failures])
        self.assertRegex(failures[0].getMessage(), r"^Pipe feeder: channel a failed: .*x\.bin")

    def test_stop_while_writing_returns_promptly_and_removes_fifos(self):
        path = self.write_bytes("x.bin", BIG_FILE_BYTES, seed=6)
        feeder = started_feeder(self, self.base_dir, {"a": [path]}, epochs=3)
        fifo = pipe.fifo_path(self.base_dir, "a", 0)
        wait_until(lambda: os.path.exists(fifo), fifo)
        with open(fifo, "rb") as reader:
            first = reader.read(10)
            self.assertFalse(feeder.join(timeout=0.2))  # blocked on the full pipe
            start = time.monotonic()
            feeder.stop()
            self.assertLess(time.monotonic() - start, 5.0)
            rest = reader.read()
        self.assertLess(len(first) + len(rest), BIG_FILE_BYTES)
        self.assertEqual(fifos_in(self.base_dir), [])
        self.assertEqual(feeder.epochs_written, {"a": 0})

    def test_stop_without_reader(self):
        path = self.write_bytes("x.bin", 10, seed=0)
        feeder = started_feeder(self, self.base_dir, {"a": [path], "b": [path]}, epochs=2)
        self.assertEqual(fifos_in(self.base_dir), ["a_0", "b_0"])
        feeder.stop()
        self.assertTrue(feeder.join(timeout=0))
        self.assertEqual(fifos_in(self.base_dir), [])

    def test_file_vanishing_before_its_epoch_fails_the_channel(self):
        path = self.write_bytes("x.bin", 10, seed=0)
        feeder = started_feeder(self, self.base_dir, {"a": [path]}, epochs=2)
        os.remove(path)
        self.assertEqual(self.read_fifo("a", 0), (b"", False))
        with self.assertRaisesRegex(pipe_feeder.FeederError, "channel 'a': .*x.bin"):
            feeder.join(timeout=WAIT_S)
        self.assertEqual(fifos_in(self.base_dir), [])

    def test_release_fifo_lets_a_blocked_reader_through(self):
        os.makedirs(pipe.pipe_dir(self.base_dir))
        fifo = pipe.fifo_path(self.base_dir, "a", 0)
        os.mkfifo(fifo)
        received = []

        def read():
            with open(fifo, "rb") as f:  # blocks until a writer opens the FIFO
                received.append(f.read())

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        time.sleep(BLOCKED_READER_S)
        pipe_feeder.release_fifo(fifo)
        reader.join(WAIT_S)
        self.assertFalse(reader.is_alive())
        self.assertEqual(received, [b""])
        self.assertFalse(os.path.exists(fifo))
        pipe_feeder.release_fifo(fifo)  # no FIFO: nothing to do

    def test_parse_channel_flag(self):
        self.assertEqual(pipe_feeder.parse_channel_flag("train_0=a.tfrecord,b*.tfrecord"),
                         ("train_0", ("a.tfrecord", "b*.tfrecord")))
        for bad in ("train_0", "=a.tfrecord", "train_0=", "train_0=,"):
            with self.assertRaisesRegex(ValueError, "NAME=FILE.*%r" % bad):
                pipe_feeder.parse_channel_flag(bad)

    @pytest.mark.slow
    def test_command_line_feeds_a_pipe_mode_reader(self):
        first = write_examples(os.path.join(self.data_dir, "part-0.tfrecord"), range(0, 20))
        write_examples(os.path.join(self.data_dir, "part-1.tfrecord"), range(20, 30))
        epochs = 2
        feeder = start_process(self, ["-m", "input_pipeline.pipe_feeder", "--base_dir", self.base_dir,
                                      "--channel", "train_0=%s" % os.path.join(self.data_dir, "part-*.tfrecord"),
                                      "--epochs", str(epochs)])
        wait_until(lambda: fifos_in(self.base_dir) == ["train_0_0"] or feeder.poll() is not None,
                   "the feeder's first FIFO")
        ids = example_ids(pipe.open_channel("train_0", self.base_dir, WAIT_S, epochs=epochs)
                          .as_numpy_iterator())
        self.assertEqual(ids, list(range(30)) * epochs)
        out, err = feeder.communicate(timeout=PROCESS_TIMEOUT_S)
        self.assertEqual(feeder.returncode, 0, err[-3000:])
        # Silent but for errors: a feeder beside a training run leaves its console to the run.
        self.assertEqual(("", ""), (out, err))
        self.assertEqual(fifos_in(self.base_dir), [])
        self.assertTrue(os.path.exists(first))

    @pytest.mark.slow
    def test_command_line_sigterm_removes_fifos(self):
        path = write_examples(os.path.join(self.data_dir, "part-0.tfrecord"), range(5))
        feeder = start_process(self, ["-m", "input_pipeline.pipe_feeder", "--base_dir", self.base_dir,
                                      "--channel", "a=%s" % path, "--channel", "b=%s" % path, "--epochs", "3",
                                      "--verbosity", "1"])
        wait_until(lambda: fifos_in(self.base_dir) == ["a_0", "b_0"] or feeder.poll() is not None,
                   "the feeder's FIFOs")
        feeder.send_signal(signal.SIGTERM)
        _, err = feeder.communicate(timeout=PROCESS_TIMEOUT_S)
        self.assertEqual(feeder.returncode, pipe_feeder.SIGNAL_EXIT_BASE + signal.SIGTERM, err[-3000:])
        self.assertEqual(fifos_in(self.base_dir), [])
        # --verbosity 1 shows the routine lines.
        self.assertIn("Pipe feeder started under", err)
        self.assertIn("Pipe feeder: signal %d, stopping" % signal.SIGTERM, err)

    @pytest.mark.slow
    def test_command_line_missing_file(self):
        missing = os.path.join(self.data_dir, "missing.tfrecord")
        feeder = start_process(self, ["-m", "input_pipeline.pipe_feeder", "--base_dir", self.base_dir,
                                      "--channel", "a=%s" % missing])
        _, err = feeder.communicate(timeout=PROCESS_TIMEOUT_S)
        self.assertNotEqual(feeder.returncode, 0)
        self.assertIn("no file matches %r" % missing, err)
        self.assertFalse(os.path.exists(self.base_dir))


if __name__ == "__main__":
    tf.test.main()
