"""`deepfm.job_config.JobConfig`: its cross-checks, its config file written and read back, its fields' flags."""

import json
import os
import re

import tensorflow as tf
from absl import flags
from absl.testing import parameterized

import strategies
from cli import config_flags
from deepfm import train as train_main
from deepfm.config import ModelConfig, TrainConfig
from deepfm.job_config import JobConfig
from deepfm.runtime import run_config
from input_pipeline import pipeline
from tests.deepfm import test_train_flags

MODEL_FN = "deepfm.models.deepfm.model_fn"
# Flags of deepfm.train that the pinned list does not hold: added since it was written.
ADDED_FLAGS = {"check_data", "config_file", "data_check_record"}
# A non-default value of each strategy's own options (a strategy without options: none).
STRATEGY_OPTIONS = {
    "single": {"table_partitions": 2}, "auto": {}, "tower": {"num_devices": 2},
    "mirrored": {"cross_device_ops": "hierarchical_copy"},
    "ps": {"ps_towers": 2}, "horovod": {"lr_scaling": "sqrt", "hvd_groups": 2, "sparse_as_dense": True},
    "hybrid": {"exchange_fp16": True},
}


def a_job(strategy_name: str = "tower", **train_changes) -> JobConfig:
    """A job whose every section holds values other than the defaults."""
    train = dict(model_dir="runs/m1", train_files=("/data/train/part-00000.libsvm",),
                 val_files=("/data/validation/part-00000.libsvm",), batch_size=64, max_steps=20, seed=3,
                 eval_every_n_steps=10, early_stopping_patience=2)
    train.update(train_changes)
    return JobConfig(
        train=TrainConfig(**train),
        model=ModelConfig(feature_size=500, field_size=5, deep_layers=(8, 4), dropout=(0.1, 0.2), optimizer="adam"),
        input=pipeline.PipelineConfig(data_format="libsvm", field_size=5, shuffle_buffer=100, seed=3,
                                      skip_bad_records=True),
        strategy=strategies.make_config(strategy_name, intra_op_threads=2, **STRATEGY_OPTIONS[strategy_name]))


class JobConfigTest(parameterized.TestCase, tf.test.TestCase):

    def write(self, record) -> str:
        model_dir = self.create_tempdir().full_path
        run_config.write(model_dir, record)
        return run_config.path(model_dir)

    @parameterized.parameters(*sorted(STRATEGY_OPTIONS))
    def test_the_written_config_loads_as_the_same_job(self, strategy_name):
        job = a_job(strategy_name)
        self.assertEqual(job, JobConfig.load(self.write(job.record(MODEL_FN))))

    def test_a_key_no_section_has_names_the_key_and_the_file(self):
        record = a_job().record(MODEL_FN)
        record["train"]["batch_sise"] = 32
        path = self.write(record)
        with self.assertRaisesRegex(ValueError, r"^%s: unknown key 'train.batch_sise' \(the train section has "
                                    % re.escape(path)):
            JobConfig.load(path)
        record = a_job().record(MODEL_FN)
        record["strategy"]["options"]["num_device"] = 2
        with self.assertRaisesRegex(ValueError, "unknown key 'strategy.options.num_device'"):
            JobConfig.from_record(record, "config.json")
        with self.assertRaisesRegex(ValueError, "^config.json: unknown key 'trian'"):
            JobConfig.from_record(dict(a_job().record(MODEL_FN), trian={}), "config.json")

    def test_a_bad_value_or_an_option_of_another_strategy_names_the_file(self):
        record = a_job().record(MODEL_FN)
        record["train"]["batch_size"] = 0
        with self.assertRaisesRegex(ValueError, "^config.json: --batch_size must be >= 1, got 0"):
            JobConfig.from_record(record, "config.json")
        record["train"]["batch_size"] = "64"
        with self.assertRaisesRegex(ValueError, "^config.json: .*not supported"):
            JobConfig.from_record(record, "config.json")
        record = a_job("single").record(MODEL_FN)
        record["strategy"]["options"]["num_devices"] = 2
        with self.assertRaisesRegex(ValueError, "^config.json: --num_devices applies to --strategy .*not single"):
            JobConfig.from_record(record, "config.json")

    def test_a_file_that_is_no_run_configuration_is_named(self):
        path = os.path.join(self.create_tempdir().full_path, "config.json")
        with open(path, "w") as f:
            f.write("{not json")
        with self.assertRaisesRegex(ValueError, "%s is not valid JSON" % re.escape(path)):
            JobConfig.load(path)
        with open(path, "w") as f:
            json.dump({"format_version": 99}, f)
        with self.assertRaisesRegex(ValueError, "%s: format_version 99" % re.escape(path)):
            JobConfig.load(path)
        with self.assertRaisesRegex(ValueError, "--config_file .*missing.json cannot be read"):
            JobConfig.load(path + ".missing.json")

    def test_what_one_section_says_about_another_is_checked_once_in_the_job(self):
        job = a_job()
        with self.assertRaisesRegex(ValueError, "--val_channel 'validation' needs --input_mode pipe"):
            a_job(val_channel="validation")
        with self.assertRaisesRegex(ValueError, "--train_channels 'train_0' needs --input_mode pipe"):
            JobConfig(job.train, job.model, job.input, strategies.make_config("single", train_channels=("train_0",)))
        with self.assertRaisesRegex(ValueError, "--train_data is required in File mode"):
            a_job(train_files=(), val_files=(), eval_every_n_steps=None, early_stopping_patience=None)
        with self.assertRaisesRegex(ValueError, "the input's field_size 39 is not the model's 5"):
            JobConfig(job.train, job.model, pipeline.PipelineConfig(), job.strategy)


class GeneratedFlagsTest(tf.test.TestCase):
    """The flags of deepfm.train come from the fields of its configuration classes, each as pinned."""

    def test_every_flag_is_a_field_with_the_pinned_type_default_and_choices(self):
        flag_values = flags.FlagValues()
        config_flags.define_flags(train_main.flag_classes(), flag_values)
        self.assertEqual(set(test_train_flags.PINNED) | ADDED_FLAGS, set(flag_values))
        for name, (flag_type, _, default, choices) in test_train_flags.PINNED.items():
            flag = flag_values[name]
            self.assertEqual((flag_type, default, choices),
                             (flag.flag_type(), flag.default, tuple(getattr(flag.parser, "enum_values", ()))), name)


if __name__ == "__main__":
    tf.test.main()
