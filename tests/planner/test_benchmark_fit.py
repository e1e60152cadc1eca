"""Tests of `planner.benchmark_fit`: the cost model fitted to and checked against benchmarks' results."""

import dataclasses
import json
import os

import tensorflow as tf

from planner import benchmark_fit as fit_lib
from planner import calibrated, cost_model
from tests import paths

# A step like the default model's on `synthetic_300k` (39 ids x batch 1,024, about 5,470 distinct).
PROFILE = cost_model.StepProfile(
    compute_s=0.042, batch_size=1024, ids_per_step=39936, distinct_ids_per_step=5469.0, embedding_size=32,
    feature_size=117_581, dense_params=170_242, dedup=False)
# Distinct ids per batch at the other batches of the tests' runs.
LARGE_BATCH = 8192
SMALL_BATCH = 256
DISTINCT_IDS = {LARGE_BATCH: 19_700.0, SMALL_BATCH: 1_500.0}
CLUSTER = cost_model.Cluster(hosts=2, cores_per_host=1, link_gbps=25.0, latency_s=0.0)
# Single's step at each batch.
COMPUTE_MS = {SMALL_BATCH: 12.0, 1024: 40.0, LARGE_BATCH: 300.0}
# The costs the tests' runs are made from.
COSTS = {cost_model.HOROVOD: cost_model.StepCosts(overhead_s=0.02, cpu_s_per_byte=5e-9, compute_factor=0.1),
         cost_model.PS: cost_model.StepCosts(overhead_s=0.01, cpu_s_per_byte=3e-9, compute_factor=0.3),
         cost_model.HYBRID: cost_model.StepCosts(overhead_s=0.01, cpu_s_per_byte=5e-9, compute_factor=0.2)}
# name: (strategy, train flags, reference)
VARIANTS = {"horovod": ("horovod", [], "single"),
            "horovod+dedup": ("horovod", [fit_lib.DEDUP_FLAG], "single+dedup"),
            "ps": ("ps", [], "single"),
            "ps+dedup": ("ps", [fit_lib.DEDUP_FLAG], "single+dedup"),
            "hybrid": ("hybrid", [], "single"),
            "hybrid+fp16": ("hybrid", [fit_lib.FP16_EXCHANGE_FLAG], "single")}


def _runs(step_ms, cpu_ms, examples_per_sec=10_000.0, tx_bytes=1e6):
    return [{"step_ms": step_ms, "cpu_ms_per_step": cpu_ms, "examples_per_sec": examples_per_sec,
             "tx_bytes_per_step": tx_bytes}]


def _variant(strategy, flags, runs, baseline="single"):
    return {"strategy": strategy, "train_flags": flags, "runs": runs, "baseline": baseline}


def _step_ms(name, batch, costs):
    """The step `costs` give variant `name` at `batch` on `CLUSTER`: compute, costs, the link."""
    strategy, flags, _ = VARIANTS[name]
    profile = dataclasses.replace(
        fit_lib.profile_at(PROFILE, batch, DISTINCT_IDS), compute_s=COMPUTE_MS[batch] / 1000.0,
        dedup=fit_lib.DEDUP_FLAG in flags, exchange_fp16=fit_lib.FP16_EXCHANGE_FLAG in flags,
        step_costs={strategy: costs[strategy]})
    if strategy == "horovod":
        strategy = cost_model.HOROVOD
    return 1000 * cost_model.predict(strategy, profile, CLUSTER).step_s


class ResultsTestCase(tf.test.TestCase):
    """Writes scale-out results made from `COSTS`."""

    def _write(self, variants, batch=1024):
        path = os.path.join(self.create_tempdir().full_path, "scale_out_%d.json" % batch)
        with open(path, "w") as f:
            json.dump({"results": {"setup": {"link_gbps": 25.0, "batch": batch}, "variants": variants}}, f)
        return path

    def _results(self, batch, costs=COSTS, names=tuple(VARIANTS)):
        compute = COMPUTE_MS[batch]
        variants = {"single": _variant("single", [], _runs(compute, compute)),
                    "single+dedup": _variant("single", [fit_lib.DEDUP_FLAG], _runs(compute, compute))}
        for name in names:
            strategy, flags, reference = VARIANTS[name]
            step = _step_ms(name, batch, costs)
            variants[name] = _variant(strategy, flags, _runs(step, step - 1.0), baseline=reference)
        return self._write(variants, batch)


class FitTest(ResultsTestCase):

    def test_fit_to_two_batches_recovers_the_costs_that_made_the_steps(self):
        paths = [self._results(1024), self._results(LARGE_BATCH)]
        fitted = fit_lib.fit(paths, PROFILE, DISTINCT_IDS)
        for strategy, costs in COSTS.items():
            self.assertAllClose(costs, fitted.costs(strategy), rtol=1e-6, atol=1e-12, msg=strategy)

    def test_the_hybrid_strategy_takes_horovods_cost_per_byte(self):
        costs = dict(COSTS, hybrid=COSTS[cost_model.HYBRID]._replace(cpu_s_per_byte=9e-9))
        fitted = fit_lib.fit([self._results(1024, costs), self._results(LARGE_BATCH, costs)], PROFILE, DISTINCT_IDS)
        self.assertAllClose(5e-9, fitted.costs(cost_model.HYBRID).cpu_s_per_byte)

    def test_one_batch_fits_no_compute_factor(self):
        costs = {strategy: c._replace(compute_factor=0.0) for strategy, c in COSTS.items()}
        fitted = fit_lib.fit([self._results(1024, costs)], PROFILE, DISTINCT_IDS)
        for strategy in (cost_model.HOROVOD, cost_model.PS):
            self.assertAllClose(costs[strategy], fitted.costs(strategy), rtol=1e-6, atol=1e-12, msg=strategy)

    def test_a_batch_without_distinct_ids_is_refused(self):
        path = self._write({"single": _variant("single", [], _runs(40.0, 40.0)),
                            "hybrid": _variant("hybrid", [], _runs(60.0, 60.0))}, batch=4096)
        with self.assertRaisesRegex(ValueError, "no distinct ids counted at a per-replica batch of 4096 "
                                                "\\(this step is at 1024\\)"):
            fit_lib.check([path], PROFILE, DISTINCT_IDS)

    def test_too_few_runs_are_named(self):
        path = self._results(1024, names=("horovod", "ps", "ps+dedup", "hybrid", "hybrid+fp16"))
        with self.assertRaisesRegex(ValueError, "1 run\\(s\\) of horovod or horovod\\+dedup, and the fit needs two"):
            fit_lib.fit([path], PROFILE, DISTINCT_IDS)

    def test_check_lists_every_two_host_variant_of_every_run_with_its_error(self):
        paths = [self._results(1024), self._results(LARGE_BATCH)]
        table = fit_lib.check(paths, dataclasses.replace(PROFILE, step_costs=COSTS), DISTINCT_IDS)
        for batch in ("1,024", "8,192"):
            for name in VARIANTS:
                self.assertRegex(table, r"\| scale_out_%s \| %s \| %s \| 2x1x1 \| [\d,]+ \| 10,000 \| [+-]\d+%% \|" % (
                    batch.replace(",", ""), batch, name.replace("+", "\\+")))
        self.assertNotIn("| single", table)

    def test_result_batches(self):
        paths = [self._results(1024), self._results(LARGE_BATCH)]
        self.assertEqual([1024, LARGE_BATCH], fit_lib.result_batches(paths))


def _entry(strategy, hosts, cores, ranks, step_ms, rate=10_000.0, reference="", batch=1024):
    return {"strategy": strategy, "hosts": hosts, "cores_per_host": cores, "ranks_per_host": ranks, "batch": batch,
            "train_flags": ["--val_data="], "reference": reference,
            "runs": [{"step_ms": step_ms, "examples_per_sec": rate, "round": 0}]}


MPI_KEY = cost_model.costs_key(cost_model.HYBRID, cost_model.MPI)
# Costs over MPI with yielding waits the tests' MPI runs are made from: hybrid's cost per byte over Gloo.
MPI_COSTS = cost_model.StepCosts(overhead_s=0.002, cpu_s_per_byte=5e-9, compute_factor=0.05)


class TransportTest(ResultsTestCase):
    """Runs over MPI with yielding waits: their own costs (`fit_mpi`), told apart from Gloo's."""

    def _mpi_results(self, batch, launcher="ssh_mpi_yield", name="hybrid+mpi_yield"):
        compute = COMPUTE_MS[batch]
        profile = dataclasses.replace(fit_lib.profile_at(PROFILE, batch, DISTINCT_IDS), compute_s=compute / 1000.0,
                                      step_costs={MPI_KEY: MPI_COSTS})
        cluster = dataclasses.replace(CLUSTER, transport=cost_model.MPI)
        step = 1000 * cost_model.predict(cost_model.HYBRID, profile, cluster).step_s
        variant = _variant("hybrid", [], _runs(step, step - 1.0))
        if launcher is not None:
            variant["launcher"] = launcher
        else:
            variant["note"] = "as +mpi, with -mca mpi_yield_when_idle 1 (waits yield the core)"
        return self._write({"single": _variant("single", [], _runs(compute, compute)), name: variant}, batch)

    def test_fit_mpi_recovers_the_costs_that_made_the_steps(self):
        profile = dataclasses.replace(PROFILE, step_costs=COSTS)
        fitted = fit_lib.fit_mpi([self._mpi_results(1024), self._mpi_results(LARGE_BATCH)], profile, DISTINCT_IDS)
        self.assertAllClose(MPI_COSTS, fitted.costs(cost_model.HYBRID, cost_model.MPI), rtol=1e-6, atol=1e-12)
        # The costs over Gloo stay as they were; horovod, none of whose variants ran over MPI, has none of its own.
        self.assertEqual(COSTS[cost_model.HYBRID], fitted.costs(cost_model.HYBRID))
        self.assertNotIn(cost_model.costs_key(cost_model.HOROVOD, cost_model.MPI), fitted.step_costs)
        with self.assertRaisesRegex(ValueError, "no run of hybrid\\+mpi_yield or horovod\\+mpi_yield or "
                                    "horovod\\+dedup\\+mpi_yield over MPI"):
            fit_lib.fit_mpi([self._results(1024)], profile, DISTINCT_IDS)

    def test_results_without_a_launcher_are_read_from_the_note(self):
        profile = dataclasses.replace(PROFILE, step_costs=COSTS)
        fitted = fit_lib.fit_mpi([self._mpi_results(1024, launcher=None), self._mpi_results(LARGE_BATCH, None)],
                                profile, DISTINCT_IDS)
        self.assertAllClose(MPI_COSTS, fitted.costs(cost_model.HYBRID, cost_model.MPI), rtol=1e-6, atol=1e-12)

    def test_mpi_runs_are_not_fitted_as_gloo_and_spinning_waits_are_left_out(self):
        measured = fit_lib.measured_variants(self._mpi_results(1024), PROFILE, DISTINCT_IDS)
        self.assertEqual(cost_model.MPI, measured["hybrid+mpi_yield"].cluster.transport)
        spinning = self._mpi_results(1024, launcher="ssh_mpi", name="hybrid+mpi")
        self.assertEqual({}, fit_lib.measured_variants(spinning, PROFILE, DISTINCT_IDS))
        with self.assertRaisesRegex(ValueError, "1 run\\(s\\) of hybrid\\+mpi_yield, and the fit needs two"):
            fit_lib.fit_mpi([self._mpi_results(1024)], PROFILE, DISTINCT_IDS)

    def test_the_launcher_names_are_the_benchmarks(self):
        from benchmarks.scale_out import variants

        self.assertCountEqual((variants.LAUNCH_DIRECT, variants.LAUNCH_GLOO), fit_lib.GLOO_LAUNCHERS)
        self.assertCountEqual((variants.LAUNCH_MPI_YIELD, variants.LAUNCH_SSH_MPI_YIELD), fit_lib.MPI_YIELD_LAUNCHERS)
        self.assertIn(fit_lib.MPI_YIELD_NOTE, variants.MPI_YIELD_ARGS)

    def test_the_calibrated_costs_over_mpi_are_the_fit_to_their_runs(self):
        runs = [os.path.join(paths.REPO_ROOT, path) for path in fit_lib.MPI_FITTED_TO]
        # Distinct ids of synthetic_300k at 8,192 (`count_distinct_ids`), which the runs trained on.
        fitted = fit_lib.fit_mpi(runs, calibrated.REFERENCE_STEP, {LARGE_BATCH: 19_670.3})
        self.assertAllClose(fit_lib.CALIBRATED_COSTS[MPI_KEY], fitted.costs(cost_model.HYBRID, cost_model.MPI),
                            rtol=1e-3, atol=1e-6)


class MulticoreTest(tf.test.TestCase):
    """Runs of `benchmarks.multicore`: layouts of several cores per rank, and what further cores give."""

    CORES = cost_model.CoreCosts(serial_fraction=0.3, exchange_spread=0.4)

    def _write(self, entries):
        path = os.path.join(self.create_tempdir().full_path, "multicore.json")
        with open(path, "w") as f:
            json.dump({"results": {"setup": {"cores_per_host": 4}, "entries": entries}}, f)
        return path

    def _made_from(self, cores=CORES):
        """single on 1 and 4 cores, hybrid at 2 hosts of 4 and of 1, their steps made by COSTS and `cores`."""
        profile = dataclasses.replace(PROFILE, compute_s=COMPUTE_MS[1024] / 1000.0, step_costs=COSTS,
                                      core_costs=cores)

        def step(hosts_cores):
            # A link too fast to count: core_points reads what a step took beyond its compute.
            cluster = cost_model.Cluster(hosts=2, cores_per_host=hosts_cores, link_gbps=1e9, latency_s=0.0,
                                         ranks_per_host=1)
            return 1000 * cost_model.predict(cost_model.HYBRID, profile, cluster).step_s

        return {"1024/single 1x1": _entry("single", 1, 1, 1, COMPUTE_MS[1024]),
                "1024/single 1x4": _entry("single", 1, 4, 1, 1000 * profile.compute_at(4),
                                          rate=10_000.0 / cores.compute_share(4)),
                "1024/hybrid 2 hosts": _entry("hybrid", 2, 4, 1, step(4), reference="1024/single 1x4"),
                "1024/hybrid 2 hosts of 1": _entry("hybrid", 2, 1, 1, step(1), reference="1024/single 1x1")}

    def test_fit_cores_recovers_the_shares_that_made_the_runs(self):
        fitted = fit_lib.fit_cores([self._write(self._made_from())], COSTS)
        self.assertAllClose(list(self.CORES), list(fitted), atol=1e-9)

    def test_check_predicts_every_layout_from_its_reference(self):
        path = self._write(self._made_from())
        measured = fit_lib.measured_variants(path, PROFILE, DISTINCT_IDS)
        self.assertEqual({"1024/hybrid 2 hosts", "1024/hybrid 2 hosts of 1"}, set(measured))
        four = measured["1024/hybrid 2 hosts"]
        self.assertEqual((2, 1, 4), (four.cluster.hosts, four.cluster.ranks, four.cluster.threads))
        # The compute on 4 cores is the reference's measured step, whatever the core costs.
        self.assertAllClose(COMPUTE_MS[1024] * self.CORES.compute_share(4) / 1000.0, four.profile.compute_at(4))
        with_cores = fit_lib.measured_variants(path, dataclasses.replace(PROFILE, core_costs=self.CORES), DISTINCT_IDS)
        self.assertAllClose(four.profile.compute_at(4), with_cores["1024/hybrid 2 hosts"].profile.compute_at(4))
        table = fit_lib.check([path], dataclasses.replace(PROFILE, step_costs=COSTS, core_costs=self.CORES),
                             DISTINCT_IDS)
        self.assertIn("| multicore | 1,024 | 1024/hybrid 2 hosts | 2x1x4 |", table)
        self.assertIn("| multicore | 1,024 | 1024/hybrid 2 hosts of 1 | 2x1x1 |", table)
        self.assertNotIn("single", table)

    def test_the_calibrated_shares_are_the_fit_to_the_16_vcpu_figures(self):
        fitted = fit_lib.fit_cores([os.path.join(paths.REPO_ROOT, path) for path in fit_lib.CORES_FITTED_TO])
        self.assertAllClose(list(fit_lib.CALIBRATED_CORE_COSTS), list(fitted), atol=1e-4)
        speedups, ratios = fit_lib.core_points([os.path.join(paths.REPO_ROOT, fit_lib.CORES_FITTED_TO[0])])
        # One process on 4 vCPUs 2.36x one; horovod's exchange at 4 vCPUs per rank two thirds of that at one.
        self.assertAllClose([(4, 72_680 / 30_771)], speedups)
        self.assertLen(ratios, 1)

    def test_runs_that_cannot_be_fitted_are_named(self):
        made = self._made_from()
        del made["1024/hybrid 2 hosts of 1"]
        with self.assertRaisesRegex(ValueError, "no distributed run at several cores per rank beside the same at "
                                    "one core per rank"):
            fit_lib.fit_cores([self._write(made)])
        with self.assertRaisesRegex(ValueError, "no single run on several cores beside one on one core"):
            fit_lib.fit_cores([self._write({"1024/single 1x1": made["1024/single 1x1"]})])

    def test_scale_out_runs_of_several_cores_per_rank_are_read_at_their_layout(self):
        variants = {"single": _variant("single", [], _runs(20.0, 40.0)),
                    "hybrid": dict(_variant("hybrid", [], _runs(30.0, 50.0)), hosts=2, cores_per_host=4,
                                   ranks_per_host=2)}
        path = os.path.join(self.create_tempdir().full_path, "scale_out.json")
        with open(path, "w") as f:
            json.dump({"results": {"setup": {"link_gbps": 0, "batch": 1024, "cores_per_host": 4,
                                             "ranks_per_host": 2}, "variants": variants}}, f)
        (hybrid,) = fit_lib.measured_variants(path, PROFILE, DISTINCT_IDS).values()
        self.assertEqual((2, 2, 2, cost_model.DEFAULT_UNLIMITED_GBPS),
                         (hybrid.cluster.hosts, hybrid.cluster.ranks, hybrid.cluster.threads, hybrid.cluster.link_gbps))



if __name__ == "__main__":
    tf.test.main()
