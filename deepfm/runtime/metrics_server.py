"""The chief's Prometheus endpoint (`deepfm.train --metrics_port`).

`MetricsServer` is a progress listener (`deepfm.runtime.hooks.ProgressRecord`): each
record sets the global step, the interval's examples/sec and mean training
loss. The last validation AUC and log loss are read, when scraped, from the
evaluation event files the Estimator writes (`<model_dir>/eval_validation`),
so every evaluation during training shows without the trainer passing it
on. The process's CPU utilization (cores busy, from `psutil`) is measured at
each scrape over the time since the previous one, and `prometheus_client`'s
own process collector adds `process_cpu_seconds_total` and memory.

    # HELP deepfm_global_step The global step after the last progress interval.
    deepfm_global_step 1200.0
    deepfm_examples_per_second 24038.0
    deepfm_loss 0.4771
    deepfm_validation_auc 0.7412
    deepfm_validation_logloss 0.4855
    deepfm_process_cpu_utilization 1.93

The official `prometheus_client` package is an optional extra
(`pip install 'deepfm-strategies[metrics]'`); `--metrics_port` without it is
refused with that instruction. A server constructed with port None does
nothing (every process but the chief).
"""

import contextlib
import glob
import os
import threading
from typing import Any, Iterator, Optional, Tuple

import psutil

from deepfm.runtime import hooks as hooks_lib

EVAL_DIR = "eval_validation"
EVENTS_PATTERN = "events.out.tfevents.*"
AUC_TAG = "auc"
LOGLOSS_TAG = "logloss"
NAMESPACE = "deepfm"
INSTALL_HINT = ("--metrics_port needs the prometheus-client package: pip install 'deepfm-strategies[metrics]' "
                "(or prometheus-client==0.26.0)")


def _prometheus():
    try:
        import prometheus_client
    except ImportError as e:
        raise ValueError(INSTALL_HINT) from e
    return prometheus_client


class LastEvaluation:
    """The latest validation AUC and log loss in an Estimator's evaluation event files (re-read when they grow)."""

    def __init__(self, model_dir: str):
        self._pattern = os.path.join(model_dir, EVAL_DIR, EVENTS_PATTERN)
        self._seen: Tuple = ()
        self._value: Tuple[Optional[float], Optional[float]] = (None, None)
        self._lock = threading.Lock()

    def read(self) -> Tuple[Optional[float], Optional[float]]:
        """(AUC, log loss) of the evaluation at the highest step; None where none was written yet."""
        with self._lock:
            files = sorted(glob.glob(self._pattern))
            state = tuple((path, os.path.getsize(path)) for path in files)
            if state != self._seen:
                self._seen = state
                self._value = self._scan(files)
            return self._value

    @staticmethod
    def _scan(files) -> Tuple[Optional[float], Optional[float]]:
        import tensorflow as tf
        best_step, auc, logloss = -1, None, None
        for path in files:
            try:
                for event in tf.compat.v1.train.summary_iterator(path):
                    values = {value.tag: value.simple_value for value in event.summary.value}
                    if AUC_TAG in values and event.step >= best_step:
                        best_step, auc, logloss = event.step, values[AUC_TAG], values.get(LOGLOSS_TAG, logloss)
            except tf.errors.DataLossError:
                continue  # the file is being written; the complete records were read
        return auc, logloss


class MetricsServer:
    """Serves the chief's training metrics over HTTP for Prometheus; a `ProgressHook` listener.

    Args:
      port: the TCP port (on every interface); None: a server that does nothing.
      model_dir: the Estimator's model directory (its evaluations are read).

    Raises:
      ValueError: a port is given and `prometheus_client` is not installed.
    """

    def __init__(self, port: Optional[int], model_dir: str):
        self.port = port
        self._httpd: Any = None
        self._thread: Any = None
        if port is None:
            return
        client = _prometheus()
        self.registry = client.CollectorRegistry()
        client.ProcessCollector(registry=self.registry)

        def gauge(name: str, text: str):
            return client.Gauge(name, text, namespace=NAMESPACE, registry=self.registry)

        self._step = gauge("global_step", "The global step after the last progress interval.")
        self._examples = gauge("examples_per_second", "Examples per second of this process over the last interval.")
        self._loss = gauge("loss", "Mean training loss over the last interval.")
        evaluation = LastEvaluation(model_dir)
        gauge("validation_auc", "Validation AUC of the last evaluation (NaN before the first).").set_function(
            lambda: _or_nan(evaluation.read()[0]))
        gauge("validation_logloss", "Validation log loss of the last evaluation (NaN before the first).").set_function(
            lambda: _or_nan(evaluation.read()[1]))
        process = psutil.Process()
        process.cpu_percent(None)
        gauge("process_cpu_utilization", "Cores this process kept busy since the previous scrape.").set_function(
            lambda: process.cpu_percent(None) / 100.0)

    def __call__(self, record: hooks_lib.ProgressRecord) -> None:
        if self.port is None:
            return
        self._step.set(record.global_step)
        self._examples.set(record.examples_per_sec)
        if record.loss is not None:
            self._loss.set(record.loss)

    @contextlib.contextmanager
    def serving(self) -> Iterator["MetricsServer"]:
        """Serves `/metrics` within the block; the port is closed on the way out."""
        if self.port is None:
            yield self
            return
        self._httpd, self._thread = _prometheus().start_http_server(self.port, registry=self.registry)
        try:
            yield self
        finally:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._thread.join()


def _or_nan(value: Optional[float]) -> float:
    return float("nan") if value is None else value
