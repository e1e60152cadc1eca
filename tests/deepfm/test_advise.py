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

    def _results(self, horovod_cpu_ms, horovod_dedup_cpu_ms, hybrid_cpu_ms=(60.0, 55.0)):
        return self._write({
            "hybrid": _variant("hybrid", [], _runs(70.0, hybrid_cpu_ms[0])),
            "hybrid+fp16": _variant("hybrid", [advise.FP16_EXCHANGE_FLAG], _runs(65.0, hybrid_cpu_ms[1])),
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
        # The hybrid's own costs, from float32 and float16 rows.
        hybrid_overhead_s, hybrid_per_byte = 0.01, 2e-9
        hybrid = []
        for fp16 in (False, True):
            profile = dataclasses.replace(PROFILE, exchange_fp16=fp16)
            handled = cost_model.traffic(cost_model.HYBRID, profile, cluster)[1]
            hybrid.append(40.0 + 1000 * (hybrid_overhead_s + hybrid_per_byte * handled))
        fitted = advise.fit(self._results(40.0 + extra[False], 40.0 + extra[True], hybrid), PROFILE)
        self.assertAllClose((overhead_s, per_byte), fitted.costs(cost_model.HOROVOD), rtol=1e-6)
        self.assertAllClose(fitted.costs(cost_model.HOROVOD), fitted.costs(cost_model.PS), rtol=1e-6)
        self.assertAllClose((hybrid_overhead_s, hybrid_per_byte), fitted.costs(cost_model.HYBRID), rtol=1e-6)

    def test_results_of_another_batch_are_refused(self):
        path = self._write({"single": _variant("single", [], _runs(40.0, 40.0))})
        with open(path) as f:
            data = json.load(f)
        data["results"]["setup"]["batch"] = 8192
        with open(path, "w") as f:
            json.dump(data, f)
        with self.assertRaisesRegex(ValueError, "per-replica batch of 8192, and this step at 1024: pass "
                                                "--batch_size 8192"):
            advise.check(path, PROFILE)

    def test_a_missing_variant_is_named(self):
        path = self._write({"single": _variant("single", [], _runs(40.0, 40.0)),
                            "horovod": _variant("horovod", [], _runs(100.0, 90.0))})
        with self.assertRaisesRegex(ValueError, "has no runs of horovod\\+dedup"):
            advise.fit(path, PROFILE)

    def test_check_lists_every_two_host_variant_with_its_error(self):
        table = advise.check(self._results(90.0, 70.0), PROFILE)
        for name in ("horovod", "horovod+dedup", "ps", "ps+dedup", "hybrid", "hybrid+fp16"):
            self.assertRegex(table, r"\| %s \| [\d,]+ \| 10,000 \| [+-]\d+%% \|" % name.replace("+", "\\+"))
        self.assertNotIn("| single", table)


if __name__ == "__main__":
    tf.test.main()
