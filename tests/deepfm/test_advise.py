"""Tests of `deepfm.advise`'s fit to and check against a scale-out benchmark's results."""

import dataclasses
import json
import os

import tensorflow as tf

from deepfm import advise
from strategies import cost_model

# A step like the default model's on `synthetic_300k` (39 ids x batch 1,024, about 5,470 distinct).
PROFILE = cost_model.StepProfile(
    compute_s=0.042, batch_size=1024, ids_per_step=39936, distinct_ids_per_step=5469.0, embedding_size=32,
    feature_size=117_581, dense_params=170_242, cpu_s_per_byte=0.0, dedup=False)


def _runs(step_ms, cpu_ms, examples_per_sec=10_000.0, tx_bytes=1e6):
    return [{"step_ms": step_ms, "cpu_ms_per_step": cpu_ms, "examples_per_sec": examples_per_sec,
             "tx_bytes_per_step": tx_bytes}]


def _variant(strategy, flags, runs, baseline="single"):
    return {"strategy": strategy, "train_flags": flags, "runs": runs, "baseline": baseline}


class FitTest(tf.test.TestCase):

    def _write(self, variants):
        path = os.path.join(self.create_tempdir().full_path, "scale_out.json")
        with open(path, "w") as f:
            json.dump({"results": {"setup": {"link_gbps": 25.0}, "variants": variants}}, f)
        return path

    def _results(self, horovod_cpu_ms, horovod_dedup_cpu_ms):
        return self._write({
            "single": _variant("single", [], _runs(40.0, 40.0)),
            "single+dedup": _variant("single", [advise.DEDUP_FLAG], _runs(40.0, 40.0)),
            "horovod": _variant("horovod", [], _runs(100.0, horovod_cpu_ms)),
            "horovod+dedup": _variant("horovod", [advise.DEDUP_FLAG], _runs(80.0, horovod_dedup_cpu_ms),
                                      baseline="single+dedup"),
            "ps": _variant("ps", [], _runs(100.0, horovod_cpu_ms)),
            "ps+dedup": _variant("ps", [advise.DEDUP_FLAG], _runs(80.0, horovod_dedup_cpu_ms),
                                 baseline="single+dedup"),
        })

    def test_fit_recovers_the_costs_that_made_the_measurements(self):
        cluster = cost_model.Cluster(hosts=2, cores_per_host=1, link_gbps=25.0, latency_s=0.0)
        overhead_s, per_byte = 0.02, 5e-9
        extra = {}
        for dedup in (False, True):
            profile = dataclasses.replace(PROFILE, dedup=dedup)
            handled = cost_model.traffic(cost_model.HOROVOD, profile, cluster)[1]
            extra[dedup] = 1000 * (overhead_s + per_byte * handled)
        fitted = advise.fit(self._results(40.0 + extra[False], 40.0 + extra[True]), PROFILE)
        self.assertAllClose((overhead_s, per_byte), fitted.costs(cost_model.HOROVOD), rtol=1e-6)
        self.assertAllClose(fitted.costs(cost_model.HOROVOD), fitted.costs(cost_model.PS), rtol=1e-6)

    def test_a_missing_variant_is_named(self):
        path = self._write({"single": _variant("single", [], _runs(40.0, 40.0)),
                            "horovod": _variant("horovod", [], _runs(100.0, 90.0))})
        with self.assertRaisesRegex(ValueError, "has no runs of horovod\\+dedup"):
            advise.fit(path, PROFILE)

    def test_check_lists_every_two_host_variant_with_its_error(self):
        table = advise.check(self._results(90.0, 70.0), PROFILE)
        for name in ("horovod", "horovod+dedup", "ps", "ps+dedup"):
            self.assertRegex(table, r"\| %s \| [\d,]+ \| 10,000 \| [+-]\d+%% \|" % name.replace("+", "\\+"))
        self.assertNotIn("| single", table)


if __name__ == "__main__":
    tf.test.main()
