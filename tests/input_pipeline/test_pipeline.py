"""Tests for input_pipeline.pipeline: the order, refusals, sharding, bad records."""

import glob
import os
import tempfile
from unittest import mock

import tensorflow as tf
from absl.testing import parameterized

from input_pipeline import files, format_base, formats, pipe_feeder, pipeline, schema
from tests.input_pipeline import example_files

FIELDS = example_files.SMALL_FIELD_SIZE
BATCH = 4
def config(**kwargs) -> pipeline.PipelineConfig:
    kwargs.setdefault("field_size", FIELDS)
    return pipeline.PipelineConfig(**kwargs)


def labels_of(dataset) -> list:
    """Every label the dataset yields, in order."""
    return [float(label) for _, labels in dataset for label in labels.numpy()]


def batches_of(dataset) -> int:
    return sum(1 for _ in dataset)


class PipelineTestCase(tf.test.TestCase, parameterized.TestCase):

    def setUp(self):
        super().setUp()
        self.dir = tempfile.mkdtemp(dir=self.get_temp_dir())

    def write_root(self, shard_rows, name="root"):
        """A dataset root whose train shards hold `shard_rows` rows, labels 0, 1, 2, ..."""
        shards, first = [], 0
        for rows in shard_rows:
            shards.append(example_files.make_rows(rows, seed=first, first_label=first))
            first += rows
        root = os.path.join(self.dir, name)
        example_files.write_dataset_root(root, {"train": shards})
        return root

    def train_files(self, root, data_format="tfrecord"):
        return files.resolve([root], data_format)


class OrderTest(PipelineTestCase):

    def test_default_order(self):
        builder = pipeline.DatasetBuilder(self.train_files(self.write_root([8])),
                                          config(cache="memory", shuffle_buffer=8), BATCH, 2)
        self.assertEqual(example_files.applied_stages(lambda: builder(tf.distribute.InputContext(2, 0))),
                         ["shard", "cache", "shuffle", "batch", "map", "repeat", "prefetch"])

    def test_optional_stages_left_out(self):
        builder = pipeline.DatasetBuilder(self.train_files(self.write_root([8])), config(), BATCH, 2)
        self.assertEqual(example_files.applied_stages(builder), ["rebatch", "map", "repeat", "prefetch"])

    @parameterized.parameters(({}, False), ({"autotune": True}, True))
    def test_autotune_thread_off_unless_asked_and_no_second_sharding(self, kwargs, autotune):
        builder = pipeline.DatasetBuilder(self.train_files(self.write_root([8])), config(**kwargs), BATCH, 1)
        options = builder(tf.distribute.InputContext()).options()
        self.assertEqual(autotune, options.autotune.enabled)
        self.assertEqual(tf.data.experimental.AutoShardPolicy.OFF, options.experimental_distribute.auto_shard_policy)
        self.assertLen(labels_of(builder(tf.distribute.InputContext())), 8)

    @parameterized.product(data_format=("tfrecord", "libsvm"), drop_remainder=(True, False),
                           cache=(None, "memory"))
    def test_chunks_batched_as_single_records_would_be(self, data_format, drop_remainder, cache):
        # Chunks of 3 records from files of 5, 7 and 2 rows: batches cross chunk and file ends.
        train = self.train_files(self.write_root([5, 7, 2]), data_format)
        read_config = config(data_format=data_format, drop_remainder=drop_remainder, cache=cache)
        with mock.patch.object(format_base, "READ_CHUNK_RECORDS", 3):
            builder = pipeline.DatasetBuilder(train, read_config, BATCH, 2)
            chunked = labels_of(builder())
            single = builder.records().batch(BATCH, drop_remainder=drop_remainder).map(builder.decode_batch)
            expected = labels_of(single.repeat(2))
            batched = read_config.data_format.batches(train, read_config, BATCH, drop_remainder)
            self.assertEqual(labels_of(batched.map(builder.decode_batch).repeat(2)), expected)
        self.assertEqual(chunked, expected)
        self.assertLen(expected, (12 if drop_remainder else 14) * 2)

    def test_element_spec(self):
        builder = pipeline.DatasetBuilder(self.train_files(self.write_root([8])), config(), BATCH)
        features, labels = builder().element_spec
        self.assertEqual(features[schema.FEAT_IDS], tf.TensorSpec([BATCH, FIELDS], tf.int64))
        self.assertEqual(features[schema.FEAT_VALS], tf.TensorSpec([BATCH, FIELDS], tf.float32))
        self.assertEqual(labels, tf.TensorSpec([BATCH], tf.float32))

    def test_cache_before_repeat_does_not_read_files_again(self):
        train = self.train_files(self.write_root([8]))
        dataset = pipeline.DatasetBuilder(train, config(cache="memory"), BATCH, 2)()
        iterator = iter(dataset)
        first_epoch = [float(label) for _ in range(2) for label in next(iterator)[1].numpy()]
        os.remove(train[0])
        second_epoch = [float(label) for _, labels in iterator for label in labels.numpy()]
        self.assertEqual(second_epoch, first_epoch)
        self.assertEqual(first_epoch, list(range(8)))

    def test_without_cache_every_pass_reads_the_files(self):
        train = self.train_files(self.write_root([8]))
        dataset = pipeline.DatasetBuilder(train, config(), BATCH, 1)()
        self.assertEqual(labels_of(dataset), list(range(8)))
        os.remove(train[0])
        with self.assertRaisesRegex(tf.errors.NotFoundError, "%s; No such file or directory" % train[0]):
            labels_of(dataset)

    @parameterized.parameters(
        ("tfrecord", tf.TensorSpec([], tf.string)),
        ("libsvm", (tf.TensorSpec([], tf.string), tf.TensorSpec([], tf.int32), tf.TensorSpec([], tf.int64))))
    def test_records_are_the_sharded_undecoded_rows(self, data_format, element_spec):
        train = self.train_files(self.write_root([6, 6]), data_format)
        builder = pipeline.DatasetBuilder(train, config(data_format=data_format), BATCH, 1)
        context = tf.distribute.InputContext(2, 1)
        records = builder.records(context)
        self.assertEqual(records.element_spec, element_spec)
        self.assertEqual(sum(1 for _ in records), 6)
        decoded = records.batch(BATCH, drop_remainder=True).map(builder.decode_batch)
        # Shard 1 of 2 is the second file, labels 6 to 11: one full batch.
        self.assertEqual(labels_of(decoded), [6.0, 7.0, 8.0, 9.0])
        self.assertEqual(labels_of(builder(context)), labels_of(decoded))

    def test_cache_to_files(self):
        train = self.train_files(self.write_root([8, 8]))
        prefix = os.path.join(self.dir, "cache", "train")
        os.makedirs(os.path.dirname(prefix))
        builder = pipeline.DatasetBuilder(train, config(cache=prefix), BATCH, 2)
        for index in range(2):
            self.assertLen(labels_of(builder(tf.distribute.InputContext(2, index))), 16)
        written = sorted(os.path.basename(path) for path in glob.glob(prefix + "*.index"))
        self.assertLen(written, 2)
        self.assertRegex(written[0], r"^train-[0-9a-f]{12}-shard0of2\.index$")
        self.assertRegex(written[1], r"^train-[0-9a-f]{12}-shard1of2\.index$")
        os.remove(train[0])
        os.remove(train[1])
        # A new iterator of the same pipeline reads the cache files only.
        self.assertEqual(sorted(labels_of(builder(tf.distribute.InputContext(2, 0)))), sorted(list(range(8)) * 2))


class RefusalTest(PipelineTestCase):

    @parameterized.named_parameters(
        ("pipe_libsvm", dict(input_mode="pipe", data_format="libsvm"),
         "Pipe mode reads TFRecord or packed TFRecord channels only, got data_format='libsvm'"),
        ("tfrecord_option_for_libsvm", dict(data_format="libsvm", max_corrupted_records=2),
         "max_corrupted_records=2 applies to TFRecord only, got data_format='libsvm'"),
        ("libsvm_option_for_tfrecord", dict(skip_bad_records=True),
         "skip_bad_records=True applies to LibSVM only, got data_format='tfrecord'"),
        ("negative_corruption_budget", dict(max_corrupted_records=-1), "max_corrupted_records must be >= 0, got -1"),
        ("input_mode", dict(input_mode="s3"), "input_mode must be one of file, pipe, got 's3'"),
        ("format", dict(data_format="csv"), "data_format must be one of tfrecord, tfrecord_packed, libsvm, got 'csv'"),
        ("negative_shuffle", dict(shuffle_buffer=-1), "shuffle_buffer must be >= 0, got -1"),
        ("parallel_reads", dict(num_parallel_reads=0), "num_parallel_reads must be >= 1 or tf.data.AUTOTUNE"),
    )
    def test_config_refused(self, kwargs, message):
        with self.assertRaisesRegex(ValueError, message):
            config(**kwargs)

    def test_format_name_is_parsed_once(self):
        parsed = config(data_format="libsvm")
        self.assertIs(parsed.data_format, formats.LIBSVM)
        self.assertEqual(parsed, config(data_format=formats.LIBSVM))

    def test_memory_cache_over_budget(self):
        train = self.train_files(self.write_root([8, 8]))
        size = sum(os.path.getsize(path) for path in train)
        builder = pipeline.DatasetBuilder(train, config(cache="memory", memory_budget_bytes=size - 1), BATCH)
        with self.assertRaisesRegex(ValueError, "cache='memory' would hold about %d bytes \\(0.0 MiB\\) of 2 "
                                                "file\\(s\\) \\(shard 0 of 1\\), more than memory_budget_bytes=%d "
                                                "bytes.*cache=<path prefix>" % (size, size - 1)):
            builder()
        # Half the data per pipeline fits.
        self.assertLen(labels_of(builder(tf.distribute.InputContext(2, 1))), 8)

    def test_builder_arguments(self):
        train = self.train_files(self.write_root([8]))
        with self.assertRaisesRegex(ValueError, "batch_size must be >= 1, got 0"):
            pipeline.DatasetBuilder(train, config(), 0)
        with self.assertRaisesRegex(ValueError, "num_epochs must be >= 1 or None"):
            pipeline.DatasetBuilder(train, config(), BATCH, 0)
        with self.assertRaisesRegex(ValueError, "File mode takes a list of files, got the string"):
            pipeline.DatasetBuilder(train[0], config(), BATCH)
        with self.assertRaisesRegex(ValueError, "input file .*gone.tfrecord does not exist"):
            pipeline.DatasetBuilder([os.path.join(self.dir, "gone.tfrecord")], config(), BATCH)
        with self.assertRaisesRegex(ValueError, "source must be a channel name, got \\["):
            pipeline.DatasetBuilder(train, config(input_mode="pipe"), BATCH)
        with self.assertRaisesRegex(ValueError, "input pipeline 2 of 2 does not exist"):
            pipeline.DatasetBuilder(train, config(), BATCH)(tf.distribute.InputContext(2, 2))

    def test_field_size_checked_at_start(self):
        root = self.write_root([8])
        with self.assertRaisesRegex(ValueError, "metadata.json says field_size=4, the pipeline is configured "
                                                "with field_size=39"):
            pipeline.DatasetBuilder(self.train_files(root), config(field_size=39), BATCH)
        loose = example_files.write_libsvm(os.path.join(self.dir, "loose.libsvm"), example_files.make_rows(2))
        with self.assertRaisesRegex(ValueError, "loose.libsvm:1: the line has 4 id:value pairs, field_size is 5"):
            pipeline.DatasetBuilder([loose], config(data_format="libsvm", field_size=5), BATCH)


class FormatTest(PipelineTestCase):

    def test_every_format_gives_the_tfrecord_pipeline(self):
        root = self.write_root([300, 7])
        # Files interleave by chunks: chunks of as many rows as a packed record's make one order.
        self.enter_context(mock.patch.object(format_base, "READ_CHUNK_RECORDS", example_files.PACKED_ROWS))
        batches = {}
        for data_format in formats.names():
            builder = pipeline.DatasetBuilder(self.train_files(root, data_format),
                                              config(data_format=data_format), BATCH)
            batches[data_format] = list(builder())
        self.assertLen(batches["tfrecord"], 307 // BATCH)
        for other in ("libsvm", "tfrecord_packed"):
            self.assertLen(batches[other], 307 // BATCH)
            for (tf_features, tf_labels), (features, labels) in zip(batches["tfrecord"], batches[other]):
                self.assertAllEqual(tf_labels, labels)
                self.assertAllEqual(tf_features[schema.FEAT_IDS], features[schema.FEAT_IDS])
                self.assertAllEqual(tf_features[schema.FEAT_VALS], features[schema.FEAT_VALS])

    def test_keep_remainder_for_evaluation(self):
        builder = pipeline.DatasetBuilder(self.train_files(self.write_root([6])),
                                          config(drop_remainder=False), BATCH)
        self.assertEqual(labels_of(builder()), list(range(6)))


class BadRecordTest(PipelineTestCase):
    """Malformed LibSVM lines and corrupt TFRecord files."""

    BAD_LINE_POSITION = 299  # 0-based: line 300, in the second read chunk

    def libsvm_files(self, bad_line="1 1:0.5 2:oops 3:1 4:1"):
        good = example_files.write_libsvm(os.path.join(self.dir, "a.libsvm"), example_files.make_rows(10))
        bad = example_files.write_libsvm(os.path.join(self.dir, "b.libsvm"),
                                         example_files.make_rows(310, first_label=10),
                                         extra_lines={self.BAD_LINE_POSITION: bad_line})
        return [good, bad]

    def test_malformed_line_names_file_and_line(self):
        train = self.libsvm_files()
        builder = pipeline.DatasetBuilder(train, config(data_format="libsvm", shuffle_buffer=64), BATCH)
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError,
                                    "%s:300: bad LibSVM line \\(it is not `label id:value ...`.*\\): "
                                    "1 1:0.5 2:oops" % train[1]):
            labels_of(builder())

    def test_skip_bad_records(self):
        train = self.libsvm_files(bad_line="1 1:0.5 2:1")
        log = os.path.join(self.dir, "stderr")
        builder = pipeline.DatasetBuilder(
            train, config(data_format="libsvm", skip_bad_records=True, drop_remainder=False), BATCH)
        with example_files.captured_stderr(log):
            labels = labels_of(builder())
        self.assertEqual(sorted(labels), list(range(320)))
        with open(log) as f:
            self.assertIn("WARNING: skipped 1 bad LibSVM line(s) of a batch; the first: %s:300: bad LibSVM line "
                          "(it has 2 id:value pairs, field_size is 4)" % train[1], f.read())

    def corrupt(self, path, how):
        with open(path, "rb") as f:
            data = bytearray(f.read())
        if how == "truncate":
            data = data[:-5]
        else:
            data[len(data) // 2] ^= 0xFF
        with open(path, "wb") as f:
            f.write(bytes(data))

    @parameterized.parameters("truncate", "flip")
    def test_corrupt_tfrecord_names_the_file(self, how):
        train = self.train_files(self.write_root([8, 8, 8]))
        self.corrupt(train[1], how)
        builder = pipeline.DatasetBuilder(train, config(), BATCH)
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError,
                                    "TFRecord file %s could not be read to its end: read [0-9]+ of %d bytes.*"
                                    "max_corrupted_records=0" % (train[1], os.path.getsize(train[1]))):
            labels_of(builder())

    def test_corrupted_records_within_budget_are_skipped(self):
        train = self.train_files(self.write_root([8, 8, 8]))
        self.corrupt(train[1], "truncate")
        log = os.path.join(self.dir, "stderr")
        builder = pipeline.DatasetBuilder(train, config(max_corrupted_records=1, drop_remainder=False), BATCH)
        with example_files.captured_stderr(log):
            labels = labels_of(builder())
        self.assertEqual(sorted(labels), [label for label in range(24) if label != 15])
        with open(log) as f:
            self.assertIn("WARNING: TFRecord file %s could not be read to its end" % train[1], f.read())

    def test_corrupted_records_over_budget(self):
        train = self.train_files(self.write_root([8, 8, 8]))
        self.corrupt(train[0], "truncate")
        self.corrupt(train[2], "flip")
        builder = pipeline.DatasetBuilder(train, config(max_corrupted_records=1), BATCH)
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError, "could not be read to its end.*"
                                                                    "max_corrupted_records=1"):
            labels_of(builder())


class ShardingTest(PipelineTestCase):

    def shard_labels(self, builder, num_shards):
        return [labels_of(builder(tf.distribute.InputContext(num_shards, index))) for index in range(num_shards)]

    def assertDisjointCover(self, shards, total):
        self.assertEqual(sorted(label for shard in shards for label in shard), list(range(total)))

    def test_by_files(self):
        train = self.train_files(self.write_root([5, 5, 5, 5]))
        builder = pipeline.DatasetBuilder(train, config(drop_remainder=False), BATCH)
        plan = builder.shard_plan(tf.distribute.InputContext(2, 1))
        self.assertEqual((plan.unit, plan.files, plan.rows_per_shard), ("files", (train[1], train[3]), (10, 10)))
        shards = self.shard_labels(builder, 2)
        self.assertDisjointCover(shards, 20)
        self.assertEqual(sorted(shards[1]), list(range(5, 10)) + list(range(15, 20)))

    @parameterized.named_parameters(
        ("one_file", [23], 3),
        ("unbalanced_files", [16, 2, 2, 2], 2),
        ("fewer_files_than_pipelines", [6, 6], 3),
    )
    def test_by_records(self, shard_rows, num_shards):
        train = self.train_files(self.write_root(shard_rows))
        builder = pipeline.DatasetBuilder(train, config(drop_remainder=False, shuffle_buffer=8, seed=1), BATCH)
        self.assertEqual(builder.shard_plan(tf.distribute.InputContext(num_shards, 0)).unit, "records")
        shards = self.shard_labels(builder, num_shards)
        self.assertDisjointCover(shards, sum(shard_rows))
        sizes = [len(shard) for shard in shards]
        self.assertLessEqual(max(sizes) - min(sizes), 1)

    @parameterized.named_parameters(
        ("files", [20, 20, 20, 19], 2, "files", 9),
        ("records", [23], 2, "records", 2),
        ("single", [6, 7], 1, "none", 3),
    )
    def test_steps_per_epoch_is_the_smallest_shard(self, shard_rows, num_shards, unit, steps):
        builder = pipeline.DatasetBuilder(self.train_files(self.write_root(shard_rows)), config(), BATCH)
        contexts = [tf.distribute.InputContext(num_shards, index) for index in range(num_shards)]
        self.assertEqual(builder.shard_plan(contexts[0]).unit, unit)
        yielded = [batches_of(builder(context)) for context in contexts]
        self.assertEqual(builder.steps_per_epoch(contexts[0]), steps)
        self.assertEqual(min(yielded), steps)

    def test_files_without_metadata_have_their_rows_counted(self):
        loose = [example_files.write_tfrecord(os.path.join(self.dir, "%d.tfrecord" % i),
                                              example_files.make_rows(rows)) for i, rows in enumerate((9, 13))]
        given = pipeline.DatasetBuilder(loose, config(), BATCH, row_counts=files.count_rows(loose, "tfrecord"))
        counted = pipeline.DatasetBuilder(loose, config(), BATCH)
        for context in (None, tf.distribute.InputContext(2, 0), tf.distribute.InputContext(2, 1)):
            self.assertEqual(given.steps_per_epoch(context), counted.steps_per_epoch(context))
        self.assertEqual(9 // BATCH, counted.steps_per_epoch(tf.distribute.InputContext(2, 0)))


class GraphModeTest(PipelineTestCase):

    def test_estimator_input_fn_in_a_graph(self):
        train = self.train_files(self.write_root([6, 6]))
        input_fn = pipeline.DatasetBuilder(train, config(shuffle_buffer=4, cache="memory"), 3, 2).input_fn()
        with tf.Graph().as_default():
            dataset = input_fn(params={}, input_context=tf.distribute.InputContext(2, 0))
            iterator = tf.compat.v1.data.make_initializable_iterator(dataset)
            features, labels = iterator.get_next()
            seen = []
            with tf.compat.v1.Session() as session:
                session.run(iterator.initializer)
                while True:
                    try:
                        ids, batch_labels = session.run([features[schema.FEAT_IDS], labels])
                    except tf.errors.OutOfRangeError:
                        break
                    self.assertEqual(ids.shape, (3, FIELDS))
                    seen.extend(batch_labels.tolist())
        self.assertEqual(sorted(seen), sorted(list(range(6)) * 2))


class PackedTest(PipelineTestCase):
    """Packed TFRecord gives the batches single-row TFRecord gives, whatever the pipeline does."""

    def rows_of(self, dataset) -> list:
        return [(features[schema.FEAT_IDS].numpy().tolist(), features[schema.FEAT_VALS].numpy().tolist(),
                 labels.numpy().tolist()) for features, labels in dataset]

    @parameterized.named_parameters(
        ("plain", {}, 1, pipeline.SHARD_NONE),
        ("keep_remainder", dict(drop_remainder=False), 1, pipeline.SHARD_NONE),
        ("shuffled", dict(shuffle_buffer=6, seed=3), 1, pipeline.SHARD_NONE),
        ("cached", dict(cache="memory"), 1, pipeline.SHARD_NONE),
        ("by_files", {}, 2, pipeline.SHARD_BY_FILES),
        ("by_records", dict(drop_remainder=False), 3, pipeline.SHARD_BY_RECORDS),
        ("by_records_cached_shuffled", dict(cache="memory", shuffle_buffer=5, seed=1), 3,
         pipeline.SHARD_BY_RECORDS))
    def test_same_batches_as_tfrecord(self, options, num_shards, unit):
        # Files of 5, 7 and 2 rows in records of 3: records cross batches, and shards cut records.
        # Single-row TFRecord read in chunks of 3 records interleaves its files as 3-row records do.
        root = self.write_root([5, 7, 2])
        self.enter_context(mock.patch.object(format_base, "READ_CHUNK_RECORDS", example_files.PACKED_ROWS))
        for index in range(num_shards):
            context = tf.distribute.InputContext(num_shards, index)
            got, steps = {}, {}
            for data_format in (formats.TFRECORD, formats.TFRECORD_PACKED):
                builder = pipeline.DatasetBuilder(self.train_files(root, data_format),
                                                  config(data_format=data_format, **options), BATCH, 2)
                self.assertEqual(builder.shard_plan(context).unit, unit)
                got[data_format] = self.rows_of(builder(context))
                steps[data_format] = builder.steps_per_epoch(context)
            self.assertNotEmpty(got[formats.TFRECORD])
            self.assertEqual(got[formats.TFRECORD_PACKED], got[formats.TFRECORD])
            self.assertEqual(steps[formats.TFRECORD_PACKED], steps[formats.TFRECORD])

    def test_order(self):
        train = self.train_files(self.write_root([8]), formats.TFRECORD_PACKED)
        builder = pipeline.DatasetBuilder(train, config(data_format=formats.TFRECORD_PACKED, cache="memory",
                                                        shuffle_buffer=8), BATCH, 2)
        self.assertEqual(example_files.applied_stages(lambda: builder(tf.distribute.InputContext(2, 0))),
                         ["cache", "map", "scan", "unbatch", "shuffle", "batch", "repeat", "prefetch"])
        plain = pipeline.DatasetBuilder(train, config(data_format=formats.TFRECORD_PACKED), BATCH, 2)
        self.assertEqual(example_files.applied_stages(plain), ["map", "rebatch", "repeat", "prefetch"])

    def test_element_spec_is_static(self):
        train = self.train_files(self.write_root([8]), formats.TFRECORD_PACKED)
        features, labels = pipeline.DatasetBuilder(train, config(data_format=formats.TFRECORD_PACKED),
                                                   BATCH)().element_spec
        self.assertEqual(features[schema.FEAT_IDS], tf.TensorSpec([BATCH, FIELDS], tf.int64))
        self.assertEqual(labels, tf.TensorSpec([BATCH], tf.float32))

    def test_single_row_records_read_as_packed(self):
        train = self.train_files(self.write_root([6]), formats.TFRECORD)
        builder = pipeline.DatasetBuilder(train, config(data_format=formats.TFRECORD_PACKED), BATCH)
        self.assertEqual(labels_of(builder()), [0.0, 1.0, 2.0, 3.0])

    def test_packed_read_as_single_rows_is_refused_at_start(self):
        train = self.train_files(self.write_root([6]), formats.TFRECORD_PACKED)
        with self.assertRaisesRegex(ValueError, "feature 'label' of the first record holds 3 float_list values, "
                                                "expected 1.*--data_format tfrecord_packed"):
            pipeline.DatasetBuilder(train, config(), BATCH)

    def test_bad_record_names_its_file(self):
        labels, ids, values = example_files.make_rows(4)
        good = example_files.serialize_packed(labels[:2], ids[:2], values[:2])
        bad = example_files.serialize_packed(labels[2:], ids[2:], values[2:, :-1])
        path = os.path.join(self.dir, "bad" + formats.TFRECORD_PACKED.extension)
        with tf.io.TFRecordWriter(path) as writer:
            writer.write(good)
            writer.write(bad)
        builder = pipeline.DatasetBuilder([path], config(data_format=formats.TFRECORD_PACKED), BATCH,
                                          row_counts={path: 4})
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError,
                                    "a packed TFRecord record of %s holds 2 row\\(s\\) \\(labels\\) with %d ids and "
                                    "%d values; each row needs field_size=%d" % (path, 2 * FIELDS, 2 * FIELDS - 2,
                                                                                 FIELDS)):
            labels_of(builder())

    def test_first_record_checked_at_start(self):
        rows = example_files.make_rows(4)
        path = example_files.write_tfrecord_packed(os.path.join(self.dir, "p.tfrecord-packed"), rows)
        with self.assertRaisesRegex(ValueError, "p.tfrecord-packed: the first record holds 3 row\\(s\\) \\(labels\\) "
                                                "and %d int64_list values in 'ids', expected %d \\(field_size is %d"
                                                % (3 * FIELDS, 3 * (FIELDS + 1), FIELDS + 1)):
            pipeline.DatasetBuilder([path], config(data_format=formats.TFRECORD_PACKED, field_size=FIELDS + 1),
                                    BATCH)


class PipeModeTest(PipelineTestCase):

    @parameterized.parameters((formats.TFRECORD, example_files.write_tfrecord),
                              (formats.TFRECORD_PACKED, example_files.write_tfrecord_packed))
    def test_reads_a_fifo_channel_and_shards_records(self, data_format, write):
        source = write(os.path.join(self.dir, "c" + data_format.extension), example_files.make_rows(10))
        base_dir = os.path.join(self.dir, "ml")
        pipe_config = config(data_format=data_format, input_mode="pipe", pipe_base_dir=base_dir, pipe_timeout_s=30)
        builder = pipeline.DatasetBuilder("train_0", pipe_config, 2, num_epochs=2, row_counts={source: 10})
        context = tf.distribute.InputContext(2, 1)
        self.assertEqual(builder.steps_per_epoch(context), 2)
        with pipe_feeder.PipeFeeder(base_dir, {"train_0": [source]}, epochs=2) as feeder:
            labels = labels_of(builder(context))
            feeder.join(timeout=30)
        self.assertEqual(labels, [1.0, 3.0, 5.0, 7.0] * 2)


if __name__ == "__main__":
    tf.test.main()
