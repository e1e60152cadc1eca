"""`deepfm.train_and_evaluate` with a `deepfm.Dataset`: the dataset's metadata is read once, when it is opened."""

import os

import tensorflow as tf

import deepfm
from dataprep import synthetic
from input_pipeline import schema
from tests.input_pipeline.test_dataset import MetadataReads

ROWS = 1_000
FEATURE_SIZE = 200
BATCH = 64
STEPS = 6
EVAL_EVERY = 3


class TrainAndEvaluateTest(tf.test.TestCase):

    def test_a_job_reads_its_dataset_metadata_once(self):
        root = self.create_tempdir().full_path
        data_dir = os.path.join(root, "data")
        synthetic.generate(ROWS, data_dir, feature_size=FEATURE_SIZE, seed=9, shards=2)
        with MetadataReads() as reads:
            data = deepfm.Dataset.open(data_dir)
            result = deepfm.train_and_evaluate(
                deepfm.TrainConfig(model_dir=os.path.join(root, "model"), train_files=data.train_files,
                                   val_files=data.val_files, batch_size=BATCH, max_steps=STEPS,
                                   eval_every_n_steps=EVAL_EVERY,
                                   # The data check reads every row once before training and looks each
                                   # file's rows up in its own metadata; left out, it is not the input
                                   # pipelines' business measured here.
                                   check_data=False),
                deepfm.ModelConfig(feature_size=data.feature_size, field_size=data.field_size, embedding_size=4,
                                   deep_layers=(8,), dropout=(0.0,)),
                dataset=data)
        self.assertEqual(STEPS, result.global_step)
        self.assertLen(result.evaluations, STEPS // EVAL_EVERY)
        # The dataset root's metadata, read by Dataset.open; no pipeline (training, two evaluations) read again.
        self.assertEqual([os.path.realpath(os.path.join(data_dir, schema.METADATA_FILE))], reads.paths)
        self.assertLen(reads.lookups, 1)


if __name__ == "__main__":
    tf.test.main()
