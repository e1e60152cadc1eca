"""Tests of the resolved configuration written next to the checkpoints and compared on resume."""

import json
import os

import tensorflow as tf

import strategies
from deepfm.config import ModelConfig, TrainConfig
from deepfm.runtime import run_config
from input_pipeline import pipeline


def _record(model_dir, **model_changes):
    train = TrainConfig(model_dir=model_dir, train_files=("a.tfrecord",), batch_size=256)
    model = ModelConfig(**dict(dict(feature_size=100), **model_changes))
    return run_config.resolved(train, model, pipeline.PipelineConfig(),
                               strategies.make_config("horovod", lr_scaling="none"), "deepfm.models.deepfm.model_fn")


class RunConfigTest(tf.test.TestCase):

    def test_every_config_is_written_with_the_adapter_options(self):
        model_dir = self.get_temp_dir()
        run_config.write(model_dir, _record(model_dir))
        with open(os.path.join(model_dir, run_config.CONFIG_FILE)) as f:
            written = json.load(f)
        self.assertEqual(256, written["train"]["batch_size"])
        self.assertEqual(100, written["model"]["feature_size"])
        self.assertEqual([128, 64, 32], written["model"]["deep_layers"])
        self.assertEqual("tfrecord", written["input"]["data_format"])
        self.assertEqual("horovod", written["strategy"]["name"])
        self.assertEqual({"class": "HorovodOptions", "lr_scaling": "none"},
                         {k: written["strategy"]["options"][k] for k in ("class", "lr_scaling")})
        self.assertEqual(written, run_config.read(model_dir))

    def test_a_new_model_dir_has_nothing_to_compare(self):
        self.assertEqual([], run_config.check_resume(self.create_tempdir().full_path, _record("m")))

    def test_legitimate_changes_are_reported_not_refused(self):
        model_dir = self.create_tempdir().full_path
        run_config.write(model_dir, _record(model_dir))
        changed = run_config.check_resume(model_dir, _record(model_dir, learning_rate=0.01, optimizer="adam"))
        self.assertEqual({"model.learning_rate", "model.optimizer"}, {name for name, _, _ in changed})

    def test_another_model_or_optimizer_slots_are_refused(self):
        model_dir = self.create_tempdir().full_path
        run_config.write(model_dir, _record(model_dir))
        with self.assertRaisesRegex(run_config.ConfigMismatchError, "model.model was 'deepfm', now 'dcn'"):
            run_config.check_resume(model_dir, _record(model_dir, model="dcn"))
        with self.assertRaisesRegex(run_config.ConfigMismatchError, "model.optimizer was 'lazy_adam', now 'sgd'"):
            run_config.check_resume(model_dir, _record(model_dir, optimizer="sgd"))

    def test_another_model_function_name_is_reported(self):
        model_dir = self.create_tempdir().full_path
        run_config.write(model_dir, _record(model_dir))
        changed = run_config.check_resume(model_dir, dict(_record(model_dir), model_fn="__main__.model_fn"))
        self.assertEqual([("model_fn", "deepfm.models.deepfm.model_fn", "__main__.model_fn")], changed)

    def test_a_damaged_file_is_named(self):
        model_dir = self.create_tempdir().full_path
        with open(os.path.join(model_dir, run_config.CONFIG_FILE), "w") as f:
            f.write("{not json")
        with self.assertRaisesRegex(ValueError, "config.json is not valid JSON"):
            run_config.read(model_dir)


if __name__ == "__main__":
    tf.test.main()
