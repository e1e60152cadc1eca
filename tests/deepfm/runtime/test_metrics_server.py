"""The chief's Prometheus endpoint: its metrics, and a scrape during a real training run."""

import math
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from unittest import mock

import psutil
import pytest
import tensorflow as tf

from dataprep import synthetic
from deepfm.runtime import hooks as hooks_lib
from deepfm.runtime import metrics_server
from jobs.local import processes
from tests import command_line

SCRAPE_TIMEOUT_S = 240
METRIC = re.compile(r"^(\w+) (\S+)$", re.M)


def scrape(port):
    """The endpoint's samples without labels, as name -> value."""
    with urllib.request.urlopen("http://localhost:%d/metrics" % port, timeout=5) as response:
        text = response.read().decode()
    return {name: float(value) for name, value in METRIC.findall(text)}


def write_evaluation(model_dir, step, auc, logloss):
    """An evaluation's summary as Estimator.evaluate writes it (TF1 simple values)."""
    with tf.Graph().as_default():
        writer = tf.compat.v1.summary.FileWriter(os.path.join(model_dir, metrics_server.EVAL_DIR))
        writer.add_summary(tf.compat.v1.Summary(value=[
            tf.compat.v1.Summary.Value(tag="auc", simple_value=auc),
            tf.compat.v1.Summary.Value(tag="logloss", simple_value=logloss)]), step)
        writer.close()


class MetricsServerTest(tf.test.TestCase):

    def test_progress_evaluations_and_cpu(self):
        model_dir = self.create_tempdir().full_path
        port = processes.free_ports(1)[0]
        server = metrics_server.MetricsServer(port, model_dir)
        with server.serving():
            before = scrape(port)
            self.assertTrue(math.isnan(before["deepfm_validation_auc"]))
            server(hooks_lib.ProgressRecord(time=0.0, elapsed=1.0, step=10, global_step=120,
                                            examples_per_sec=2048.0, loss=0.5, interval_steps=10))
            write_evaluation(model_dir, 100, 0.71, 0.48)
            write_evaluation(model_dir, 200, 0.73, 0.46)
            sum(i * i for i in range(2_000_000))  # keep a core busy between scrapes
            after = scrape(port)
        self.assertEqual(120, after["deepfm_global_step"])
        self.assertEqual(2048, after["deepfm_examples_per_second"])
        self.assertEqual(0.5, after["deepfm_loss"])
        self.assertAlmostEqual(0.73, after["deepfm_validation_auc"], places=5)
        self.assertAlmostEqual(0.46, after["deepfm_validation_logloss"], places=5)
        self.assertGreater(after["deepfm_process_cpu_utilization"], 0.1)
        self.assertIn("process_cpu_seconds_total", after)
        with self.assertRaises(urllib.error.URLError):
            scrape(port)  # the port is closed with the block

    def test_no_port_serves_nothing(self):
        def listening():
            return {c.laddr for c in psutil.Process().connections("tcp") if c.status == psutil.CONN_LISTEN}

        before = listening()
        server = metrics_server.MetricsServer(None, self.create_tempdir().full_path)
        with server.serving() as serving:
            self.assertIs(server, serving)
            server(hooks_lib.ProgressRecord(0.0, 1.0, 1, 1, 1.0, None, 1))
            self.assertEqual(before, listening())
        self.assertFalse(hasattr(server, "registry"))  # no metric was made, so none was set

    def test_missing_package_is_named(self):
        with mock.patch.dict(sys.modules, {"prometheus_client": None}):
            with self.assertRaisesRegex(ValueError, r"pip install 'deepfm-strategies\[metrics\]'"):
                metrics_server.MetricsServer(9090, self.create_tempdir().full_path)


@pytest.mark.slow
class ScrapeDuringTrainingTest(tf.test.TestCase):
    """`deepfm.train --metrics_port`: Prometheus's view of a real run, scraped while it trains."""

    def test_scrape(self):
        data = self.create_tempdir("data").full_path
        synthetic.generate(20_000, data, feature_size=1000, seed=3)
        port = processes.free_ports(1)[0]
        argv = command_line.python_module(
            "deepfm.train", "--train_data", data, "--model_dir", self.create_tempdir("model").full_path,
            "--batch_size", "32", "--embedding_size", "4", "--deep_layers", "8", "--dropout", "0", "--num_epochs", "2",
            "--log_every_n_steps", "10", "--eval_every_n_steps", "150", "--metrics_port", str(port))
        process = command_line.start(argv, self.get_temp_dir(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        self.addCleanup(command_line.kill_group, process)
        scrapes = []
        deadline = time.monotonic() + SCRAPE_TIMEOUT_S
        while process.poll() is None and time.monotonic() < deadline:
            try:
                scrapes.append(scrape(port))
            except (urllib.error.URLError, ConnectionError):
                pass
            if scrapes and not math.isnan(scrapes[-1]["deepfm_validation_auc"]) and len(scrapes) > 3:
                break
            time.sleep(0.5)
        self.assertIsNone(process.poll(), "training ended before an evaluation was scraped:\n%s"
                          % process.communicate()[0][-3000:])
        output, _ = process.communicate(timeout=SCRAPE_TIMEOUT_S)
        self.assertEqual(0, process.returncode, output[-3000:])
        last = scrapes[-1]
        self.assertGreaterEqual(last["deepfm_global_step"], 150)
        self.assertGreater(last["deepfm_examples_per_second"], 0)
        self.assertGreater(last["deepfm_loss"], 0)
        self.assertGreater(last["deepfm_validation_auc"], 0.5)
        self.assertGreater(last["deepfm_validation_logloss"], 0)
        steps = [s["deepfm_global_step"] for s in scrapes if s["deepfm_global_step"] > 0]
        self.assertEqual(sorted(steps), steps)
        self.assertTrue(any(s["deepfm_process_cpu_utilization"] > 0.1 for s in scrapes))
        with self.assertRaises(urllib.error.URLError):
            scrape(port)  # closed when training ended


if __name__ == "__main__":
    tf.test.main()
