"""Tests of jobs.sagemaker.metrics against the lines training really prints.

The lines are made by the functions that print them (the progress line, an
evaluation, the summary): a change of their format that the metric
definitions no longer read fails here.
"""

import re

import tensorflow as tf

from deepfm.runtime import console, early_stopping, trainer
from jobs.sagemaker import metrics

MPI_PREFIX = "[1,0]<stdout>:"


def evaluation_lines(model_dir):
    """What training prints for two evaluations, the second not better than the first."""
    printed = []
    tracker = early_stopping.BestCheckpoint(model_dir, keep=False)
    early_stopping.report_evaluation(tracker, early_stopping.Evaluation(200, 0.7712, 0.4686), None, printed.append)
    early_stopping.report_evaluation(tracker, early_stopping.Evaluation(400, 0.7698, 0.4701), None, printed.append)
    return printed


class MetricDefinitionsTest(tf.test.TestCase):

    def test_every_metric_is_read_from_the_lines_training_prints(self):
        log = [
            "Invoking script with the following command:",
            console.format_progress(100, 800, 123456.7, 0.51234, elapsed=4.0, remaining=30.0, epoch=1,
                                    num_epochs=2),
            MPI_PREFIX + console.format_progress(200, 800, 98765.4, 0.49876, elapsed=8.0, remaining=26.0),
            console.format_progress(300, 800, 5.0, None, elapsed=9.0, remaining=None),
            console.format_progress(400, None, 6.0, 0.47, elapsed=10.0, remaining=None),  # Pipe mode
        ] + evaluation_lines(self.get_temp_dir()) + trainer.summary(trainer.TrainResult(
            auc=0.7712, logloss=0.4686, examples_per_sec=120000.0, global_step=800, model_dir="/m",
            strategy="single")).splitlines() + [
            "early stopping at step 400: no better validation AUC in 1 evaluations; the best is step 200 (AUC 0.7712)"]
        found = metrics.series(log)
        self.assertEqual({
            metrics.TRAIN_LOSS: [0.5123, 0.4988, 0.47],
            metrics.TRAIN_EXAMPLES_PER_SEC: [123457.0, 98765.0, 5.0, 6.0],
            metrics.VALIDATION_AUC: [0.7712, 0.7698, 0.7712],
            metrics.VALIDATION_LOGLOSS: [0.4686, 0.4701, 0.4686],
        }, found)

    def test_the_definitions_are_valid_sagemaker_metric_definitions(self):
        # CreateTrainingJob: Name 1-255 characters of .+, Regex 1-500 characters; one group is the value.
        for definition in metrics.METRIC_DEFINITIONS:
            self.assertEqual({"Name", "Regex"}, set(definition))
            self.assertLessEqual(len(definition["Regex"]), 500)
            self.assertEqual(1, re.compile(definition["Regex"]).groups)
        self.assertIn(metrics.OBJECTIVE_METRIC, [d["Name"] for d in metrics.METRIC_DEFINITIONS])

    def test_lines_of_other_tools_are_not_metrics(self):
        self.assertEqual({}, metrics.series([
            "sagemaker-training-toolkit INFO     Reporting training SUCCESS",
            "validation AUC:        n/a",
            "loss 0.5 is not a progress line",
        ]))


if __name__ == "__main__":
    tf.test.main()
