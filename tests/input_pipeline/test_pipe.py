"""Tests of `input_pipeline.pipe`: the real `PipeModeDataset` on real FIFOs.

The FIFOs are fed by `input_pipeline.pipe_feeder.PipeFeeder`, in a thread of
the test process or, for the command line, in a subprocess; the records are
`tf.train.Example`s with distinct ids, so that each one can be counted.
"""

import json
import os
import tempfile
import threading
import time
from unittest import mock

import pytest
import tensorflow as tf
from absl.testing import parameterized

from input_pipeline import pipe, sharding
from tests.input_pipeline import test_pipe_feeder as feeding

WAIT_S = 30.0
TINY_TIMEOUT_S = 0.3
# A wait only `release_waits` ends within a test, released this long after it began.
LONG_TIMEOUT_S = 600.0
RELEASE_AFTER_S = 0.5
# A missing FIFO must be reported within this, whatever the reader's own wait.
ERROR_BOUND_S = 10.0
RECORDS_PER_FILE = 12
BATCH_SIZE = 5


def check_channels(channels, workers_per_host: int, base_dir: str) -> list:
    """Checks that the workers of a host each get their own channel, configured in Pipe mode.

    Returns:
      The channels the workers of a host read, by local rank.
    """
    used = [sharding.assign_channel(channels, local_rank, workers_per_host)
            for local_rank in range(workers_per_host)]
    for channel in used:
        pipe.check_channel(channel, base_dir)
    return used


class PipeTest(tf.test.TestCase, parameterized.TestCase):

    def setUp(self):
        super().setUp()
        self.data_dir = tempfile.mkdtemp(dir=self.get_temp_dir())
        self.base_dir = os.path.join(tempfile.mkdtemp(dir=self.get_temp_dir()), "ml")

    def write_files(self, first_id: int, files: int = 2):
        """Writes `files` TFRecord files of consecutive ids from `first_id`.

        Returns:
          The file paths and every id, in file order.
        """
        paths, ids = [], []
        for index in range(files):
            file_ids = list(range(first_id + index * RECORDS_PER_FILE, first_id + (index + 1) * RECORDS_PER_FILE))
            paths.append(feeding.write_examples(
                os.path.join(self.data_dir, "part-%d-%d.tfrecord" % (first_id, index)), file_ids))
            ids += file_ids
        return paths, ids

    def write_config(self, config: dict) -> None:
        os.makedirs(pipe.input_config_dir(self.base_dir), exist_ok=True)
        with open(pipe.input_data_config_path(self.base_dir), "w") as f:
            json.dump(config, f)

    def assertEpochs(self, got, expected_ids, epochs: int):
        """Every record arrives exactly once per epoch, epoch after epoch, in stream order."""
        self.assertLen(got, len(expected_ids) * epochs)
        for epoch in range(epochs):
            self.assertEqual(got[epoch * len(expected_ids):(epoch + 1) * len(expected_ids)], expected_ids,
                             "epoch %d" % epoch)

    @parameterized.named_parameters(
        ("epochs_argument", 3, 1, False),
        ("repeat_on_top", 1, 3, False),
        ("batch_parallel_map_repeat_prefetch", 1, 3, True),
    )
    def test_reads_every_record_once_per_epoch(self, epochs, repeats, batched):
        paths, ids = self.write_files(first_id=1000)
        total_epochs = epochs * repeats
        feeder = feeding.started_feeder(self, self.base_dir, {"train_0": paths}, total_epochs)
        dataset = pipe.open_channel("train_0", self.base_dir, WAIT_S, epochs=epochs)
        self.assertEqual(dataset.element_spec, tf.TensorSpec([], tf.string))
        if batched:  # the shape of a training pipeline: batch, decode in parallel, repeat, prefetch
            dataset = dataset.batch(BATCH_SIZE).map(tf.identity, num_parallel_calls=tf.data.AUTOTUNE)
            dataset = dataset.repeat(repeats).prefetch(tf.data.AUTOTUNE).unbatch()
        else:
            dataset = dataset.repeat(repeats)
        got = feeding.example_ids(dataset.as_numpy_iterator())
        self.assertEpochs(got, ids, total_epochs)
        self.assertTrue(feeder.join(timeout=WAIT_S))
        # No FIFO past the last epoch was opened.
        self.assertEqual(pipe.next_epoch("train_0", pipe.state_dir(self.base_dir)), total_epochs)

    def test_next_pipeline_goes_on_with_the_next_epoch(self):
        paths, ids = self.write_files(first_id=0, files=1)
        feeding.started_feeder(self, self.base_dir, {"train_0": paths}, epochs=3)
        first = feeding.example_ids(pipe.open_channel("train_0", self.base_dir, WAIT_S, epochs=1)
                                    .as_numpy_iterator())
        rest = feeding.example_ids(pipe.open_channel("train_0", self.base_dir, WAIT_S, epochs=2)
                                   .as_numpy_iterator())
        self.assertEpochs(first, ids, 1)
        self.assertEpochs(rest, ids, 2)

    def test_graph_mode_session(self):
        paths, ids = self.write_files(first_id=500)
        feeding.started_feeder(self, self.base_dir, {"train_0": paths}, epochs=2)
        with tf.Graph().as_default():
            dataset = pipe.open_channel("train_0", self.base_dir, WAIT_S, epochs=2).batch(BATCH_SIZE)
            next_batch = tf.compat.v1.data.make_one_shot_iterator(dataset).get_next()
            self.assertEqual(next_batch.shape.as_list(), [None])
            batches = []
            with tf.compat.v1.Session() as session:
                with self.assertRaises(tf.errors.OutOfRangeError):
                    while True:
                        batches.append(session.run(next_batch))
        self.assertTrue(all(len(batch) == BATCH_SIZE for batch in batches[:-1]))
        self.assertEpochs(feeding.example_ids(record for batch in batches for record in batch), ids, 2)

    @pytest.mark.slow
    def test_two_workers_in_processes_read_their_own_channels(self):
        workers_per_host, epochs = 2, 3
        channels = ["train_%d" % rank for rank in range(workers_per_host)]
        files, ids = {}, {}
        for rank, channel in enumerate(channels):
            files[channel], ids[channel] = self.write_files(first_id=10000 * (rank + 1))
        feeder = feeding.started_feeder(self, self.base_dir, files, epochs)
        self.assertEqual(check_channels(channels, workers_per_host, self.base_dir), channels)
        readers = {}
        for local_rank in range(workers_per_host):
            channel = sharding.assign_channel(channels, local_rank, workers_per_host)
            readers[channel] = feeding.start_reader(self, self.base_dir, channel, epochs)
        for channel, reader in readers.items():
            self.assertEpochs(feeding.reader_output(reader)["ids"], ids[channel], epochs)
        self.assertTrue(feeder.join(timeout=WAIT_S))
        self.assertEqual(feeding.fifos_in(self.base_dir), [])

    def test_channel_not_configured_lists_configured_channels(self):
        self.write_config({"train_0": {"TrainingInputMode": "Pipe"},
                           "validation": {"TrainingInputMode": "File"}})
        with self.assertRaisesRegex(ValueError, r"'train_1' is not in .*inputdataconfig.json.*"
                                                r"train_0 \(Pipe\), validation \(File\)"):
            pipe.open_channel("train_1", self.base_dir, TINY_TIMEOUT_S)
        with self.assertRaisesRegex(ValueError, "'validation' .* TrainingInputMode='File', not 'Pipe'"):
            pipe.open_channel("validation", self.base_dir, TINY_TIMEOUT_S)

    def test_missing_or_bad_config(self):
        with self.assertRaisesRegex(FileNotFoundError, "inputdataconfig.json"):
            pipe.open_channel("train_0", self.base_dir, TINY_TIMEOUT_S)
        os.makedirs(pipe.input_config_dir(self.base_dir))
        with open(pipe.input_data_config_path(self.base_dir), "w") as f:
            f.write("{not json")
        with self.assertRaisesRegex(ValueError, "inputdataconfig.json is not valid JSON"):
            pipe.open_channel("train_0", self.base_dir, TINY_TIMEOUT_S)

    def test_fifo_that_never_appears_times_out(self):
        self.write_config({"train_0": {"TrainingInputMode": "Pipe"}})
        start = time.monotonic()
        with self.assertRaisesRegex(TimeoutError, "FIFO .*/input/data/train_0_0 .* within 0.3 s"):
            pipe.open_channel("train_0", self.base_dir, TINY_TIMEOUT_S)
        self.assertLess(time.monotonic() - start, ERROR_BOUND_S)

    def test_later_epoch_fifo_that_never_appears_fails_within_timeout(self):
        paths, ids = self.write_files(first_id=0, files=1)
        feeder = feeding.started_feeder(self, self.base_dir, {"train_0": paths}, epochs=1)
        iterator = pipe.open_channel("train_0", self.base_dir, TINY_TIMEOUT_S, epochs=2).as_numpy_iterator()
        got = [next(iterator) for _ in ids]
        self.assertEqual(feeding.example_ids(got), ids)
        self.assertTrue(feeder.join(timeout=WAIT_S))
        start = time.monotonic()
        with self.assertRaisesRegex(tf.errors.UnknownError, "train_0_1 of channel 'train_0' did not appear"):
            next(iterator)
        self.assertLess(time.monotonic() - start, ERROR_BOUND_S)

    def test_a_released_wait_for_a_later_epoch_fails_at_once(self):
        paths, ids = self.write_files(first_id=0, files=1)
        feeder = feeding.started_feeder(self, self.base_dir, {"train_0": paths}, epochs=1)
        # A timeout no test waits out: only the release can end the wait.
        iterator = pipe.open_channel("train_0", self.base_dir, LONG_TIMEOUT_S, epochs=2).as_numpy_iterator()
        got = [next(iterator) for _ in ids]
        self.assertEqual(feeding.example_ids(got), ids)
        self.assertTrue(feeder.join(timeout=WAIT_S))
        releaser = threading.Timer(RELEASE_AFTER_S, pipe.release_waits)
        releaser.start()
        self.addCleanup(releaser.cancel)
        start = time.monotonic()
        with self.assertRaisesRegex(tf.errors.UnknownError, "no longer waiting for .*train_0_1 .*training ended"):
            next(iterator)
        self.assertBetween(time.monotonic() - start, RELEASE_AFTER_S, RELEASE_AFTER_S + ERROR_BOUND_S)

    def test_check_channels(self):
        self.write_config({name: {"TrainingInputMode": "Pipe"} for name in ("train_0", "train_1")})
        self.assertEqual(check_channels(["train_0", "train_1"], 2, self.base_dir), ["train_0", "train_1"])
        self.assertEqual(check_channels(["train_1", "train_0"], 1, self.base_dir), ["train_1"])
        with self.assertRaisesRegex(ValueError, r"2 workers per host need 2 channels, got 1: \['train_0'\]"):
            check_channels(["train_0"], 2, self.base_dir)
        with self.assertRaisesRegex(ValueError, "'train_0' is listed 2 times"):
            check_channels(["train_0", "train_0"], 2, self.base_dir)
        with self.assertRaisesRegex(ValueError, "'train_2' is not in"):
            check_channels(["train_0", "train_2"], 2, self.base_dir)

    def test_bad_arguments(self):
        self.write_config({"train_0": {"TrainingInputMode": "Pipe"}})
        with self.assertRaisesRegex(ValueError, "epochs must be >= 1 or None .*got 0"):
            pipe.open_channel("train_0", self.base_dir, TINY_TIMEOUT_S, epochs=0)
        with self.assertRaisesRegex(ValueError, "timeout_s must be > 0, got -1"):
            pipe.open_channel("train_0", self.base_dir, -1)

    def test_base_dir_from_environment(self):
        with mock.patch.dict(os.environ, {pipe.BASE_DIR_ENV: self.base_dir}):
            self.assertEqual(pipe.default_base_dir(), self.base_dir)
            self.assertEqual(pipe.fifo_path(None, "train_0", 3), os.path.join(self.base_dir, "input/data/train_0_3"))
        with mock.patch.dict(os.environ, {}, clear=True):
            self.assertEqual(pipe.default_base_dir(), pipe.DEFAULT_BASE_DIR)


if __name__ == "__main__":
    tf.test.main()
