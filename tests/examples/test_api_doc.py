"""docs/api.md stays true: its table lists `deepfm.__all__`, and its short model_fn trains."""

import os
import re

import tensorflow as tf

import deepfm
from tests import paths
from tests.examples import examples_testing

API_DOC = os.path.join(paths.REPO_ROOT, "docs", "api.md")
CODE_BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)
TABLE_NAME = re.compile(r"^\| `(\w+)` \|", re.MULTILINE)
# The logistic regression of the page, one epoch of the shared dataset. Measured: 0.71.
MIN_AUC = 0.6


def read_doc() -> str:
    with open(API_DOC) as f:
        return f.read()


class ApiDocTest(tf.test.TestCase):

    def test_the_table_lists_every_public_name(self):
        section = read_doc().split("## What `import deepfm` offers", 1)[1].split("\n## ", 1)[0]
        self.assertEqual(sorted(deepfm.__all__), sorted(TABLE_NAME.findall(section)))

    def test_the_short_model_fn_trains(self):
        (source,) = [block for block in CODE_BLOCK.findall(read_doc()) if "def model_fn(" in block]
        namespace = {}
        exec(compile(source, API_DOC, "exec"), namespace)
        data = deepfm.Dataset.open(examples_testing.shared_dataset())
        model_dir = self.create_tempdir().full_path
        result = deepfm.train_and_evaluate(
            deepfm.TrainConfig(model_dir=model_dir, train_files=data.train_files, val_files=data.val_files,
                               batch_size=64),
            deepfm.ModelConfig(feature_size=data.feature_size, field_size=data.field_size, learning_rate=0.1),
            model_fn=namespace["model_fn"])
        self.assertGreater(result.auc, MIN_AUC)
        names = [name for name, _ in tf.train.list_variables(model_dir)]
        self.assertIn("logistic/weights", names)


if __name__ == "__main__":
    tf.test.main()
