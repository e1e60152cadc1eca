"""Tests of the scale-out benchmark: its measurement arithmetic, the host layouts, and a tiny real run."""

import dataclasses
import json
import os
import signal
import subprocess
import sys
from unittest import mock

import pytest
import tensorflow as tf

from benchmarks import common
from benchmarks import scale_out as bench
from benchmarks.scale_out import layout, runner, supervisor
from dataprep import synthetic
from deepfm.runtime import hooks
from jobs.local import hosts as hosts_lib
from strategies import strategy_names as names

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROWS = 3000
FEATURE_SIZE = 2000
STEPS = 20
WARMUP = 10
# The real run's per-replica batch: small, its steps quick (what it checks does not depend on the batch).
RUN_BATCH = 64
# The real run's variants whose run is traced.
TRACED_VARIANTS = ("single", "horovod", "hybrid")


def _config(variants="single,ps,horovod", **overrides):
    args = ["--variants", variants, "--runs", "1", "--steps", str(STEPS), "--warmup_steps", str(WARMUP)]
    for key, value in overrides.items():
        args.append("--%s=%s" % (key, value))
    return bench.make_config(bench.parse_args(args))


def _write_progress(path, points):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    progress_file = hooks.ProgressFile(path)
    for when, step in points:
        progress_file(hooks.ProgressRecord(time=when, elapsed=when, step=step, global_step=step,
                                           examples_per_sec=0.0, loss=None, interval_steps=10))


class StepSplitTest(tf.test.TestCase):

    def test_compute_communication_and_waiting_add_up_to_the_step(self):
        compute, comm, waiting = bench.step_split(step_ms=50.0, cpu_ms_per_step=40.0, compute_ms=30.0)
        self.assertEqual((30.0, 10.0, 10.0), (compute, comm, waiting))

    def test_a_busy_core_has_no_waiting_and_a_fast_step_no_negative_parts(self):
        self.assertEqual((30.0, 20.0, 0.0), bench.step_split(50.0, 60.0, 30.0))
        self.assertEqual((20.0, 0.0, 0.0), bench.step_split(20.0, 15.0, 30.0))


class ConfigTest(tf.test.TestCase):

    def test_every_variant_trains_the_same_examples(self):
        config = _config(variants="single,single_x2,ps,horovod,hybrid", batch_size=4096)
        self.assertEqual(4096, config.batch)
        for variant in config.variants:
            # Independent copies of single each train what single does.
            processes = 1 if variant.is_single else variant.processes
            self.assertEqual(config.examples, config.max_steps(variant) * processes * 4096, variant.name)

    def test_batch_and_run_flags_reach_every_training(self):
        config = _config(variants="single,hybrid+fp16", batch_size=8192, train_flag="--large_batch_rule=cowclip")
        for variant in config.variants:
            (process,) = bench.host_processes(variant, config, self.get_temp_dir(), 0)
            argv = process["argv"]
            self.assertEqual("8192", argv[argv.index("--batch_size") + 1])
            self.assertIn("--large_batch_rule=cowclip", argv)
        self.assertIn("--exchange_fp16", argv)
        with self.assertRaisesRegex(ValueError, "--train_flag 'exchange_fp16': give a whole deepfm.train flag"):
            _config(train_flag="exchange_fp16")

    def test_efficiency_counts_the_processes_or_the_shared_cores(self):
        config = _config(variants="single,hybrid")
        single, hybrid = config.variants
        self.assertEqual((1, 2), (config.references(single), config.references(hybrid)))
        shared = dataclasses.replace(config, shared_cores=2, variants=(single, dataclasses.replace(hybrid, hosts=8)))
        self.assertEqual((1, 2), (shared.references(single), shared.references(shared.variants[1])))
        self.assertEqual(8, shared.num_hosts)
        # Every host on the same first two cores; a single among them on one.
        plan = layout.plan(shared.variants[1], [5, 6, 7], shared.shared_cores)
        self.assertEqual(((5, 6),) * 8, plan.hosts)
        self.assertEqual(((5,),), layout.plan(single, [5, 6, 7], shared.shared_cores).hosts)
        with self.assertRaisesRegex(ValueError, "2 shared core\\(s\\) need 2 vCPUs; this process may use 1 \\(5\\)"):
            layout.plan(shared.variants[1], [5], shared.shared_cores)

    def test_targets_by_batch(self):
        self.assertEqual(0.75, bench.target_efficiency(1024))
        self.assertEqual(0.90, bench.target_efficiency(8192))

    def test_bad_arguments_are_named(self):
        with self.assertRaisesRegex(ValueError, "unknown 'mirrored'"):
            _config(variants="mirrored")
        with self.assertRaisesRegex(ValueError, "--link_gbps must be >= 0, got -1"):
            _config(link_gbps=-1)

    def test_a_launcher_needs_horovod_ranks(self):
        with self.assertRaisesRegex(ValueError, "variant x: launcher 'mpi' needs a strategy of Horovod ranks"):
            bench.Variant("x", names.PS, "", launcher=bench.LAUNCH_MPI)

    def test_lever_references_are_variants(self):
        names = {v.name for v in bench.all_variants()}
        for _, name, reference in bench.LEVER_COMPARISONS:
            self.assertIn(name, names)
            self.assertIn(reference, names)
        for variant in bench.all_variants():
            self.assertIn(variant.baseline, names)


class HostProcessesTest(tf.test.TestCase):

    def test_ps_layout_is_sagemakers(self):
        config = _config()
        ps_variant = [v for v in config.variants if v.name == "ps"][0]
        tasks = []
        for index in range(2):
            for process in bench.host_processes(ps_variant, config, self.get_temp_dir(), index):
                tasks.append((index, json.loads(process["env"]["TF_CONFIG"])))
        self.assertEqual([(0, "ps", 0), (0, "master", 0), (1, "ps", 1), (1, "worker", 0)],
                         [(i, t["task"]["type"], t["task"]["index"]) for i, t in tasks])
        for index in range(2):
            ps, trainer = bench.host_processes(ps_variant, config, self.get_temp_dir(), index)
            # The toolkit's kind of parameter server: a plain server, stopped when the host's trainer ends.
            self.assertTrue(ps["service"])
            self.assertEqual(["-m", "benchmarks.scale_out.supervisor", "ps"], ps["argv"][1:])
            self.assertFalse(trainer["service"])
        cluster = tasks[0][1]["cluster"]
        self.assertEqual(["algo-1:2222"], cluster["master"])
        self.assertEqual(["algo-1:2223", "algo-2:2223"], cluster["ps"])

    def test_horovod_ranks_get_horovodruns_environment(self):
        config = _config()
        horovod = [v for v in config.variants if v.name == "horovod"][0]
        for index in range(2):
            (process,) = bench.host_processes(horovod, config, self.get_temp_dir(), index)
            env = process["env"]
            self.assertEqual(str(index), env["HOROVOD_RANK"])
            self.assertEqual(str(index), env["HOROVOD_CROSS_RANK"])
            self.assertEqual("2", env["HOROVOD_SIZE"])
            self.assertEqual("algo-1", env["HOROVOD_GLOO_RENDEZVOUS_ADDR"])
            self.assertEqual("gloo", env["HOROVOD_CONTROLLER"])
            self.assertIn("--max_steps", process["argv"])

    def test_hybrid_ranks_rendezvous_like_horovods(self):
        config = _config(variants="hybrid")
        (hybrid,) = config.variants
        (process,) = bench.host_processes(hybrid, config, self.get_temp_dir(), 1)
        self.assertEqual("1", process["env"]["HOROVOD_RANK"])
        argv = process["argv"]
        self.assertEqual("hybrid", argv[argv.index("--strategy") + 1])

    def test_ranks_in_one_host_are_started_by_horovods_launcher_as_deepfm_launch_starts_it(self):
        config = _config(variants="hybrid")
        variant = bench.Variant("hybrid/mpi", names.HYBRID, "", hosts=1, ranks_per_host=2,
                                launcher=bench.LAUNCH_MPI_TCP)
        self.assertEqual(1, variant.num_hosts)
        (process,) = bench.host_processes(variant, config, self.get_temp_dir(), 0)
        argv = process["argv"]
        self.assertEqual([sys.executable, "-m", "jobs.local.horovod_runner"], argv[:3])
        self.assertEqual(["--mpi", "--mpi-args=-mca btl tcp,self", "-np", "2", "-H", "localhost:2"], argv[3:9])
        self.assertIn("deepfm.train", argv)
        self.assertNotIn("HOROVOD_RANK", process["env"])

    def test_ranks_of_every_host_are_started_by_mpirun_over_ssh(self):
        config = _config(variants="hybrid+mpi_yield")
        (variant,) = config.variants
        self.assertTrue(variant.over_ssh and variant.ranks_on_every_host)
        first = bench.host_processes(variant, config, self.get_temp_dir(), 0)
        (second,) = bench.host_processes(variant, config, self.get_temp_dir(), 1)
        # Every host serves ssh; algo-1 runs mpirun once every sshd listens, as SageMaker's toolkit does.
        self.assertEqual([["/usr/sbin/sshd", "-D", "-e"]] * 2, [first[0]["argv"], second["argv"]])
        self.assertTrue(first[0]["service"] and second["service"])
        mpirun = first[1]
        self.assertEqual(["algo-1:22", "algo-2:22"], mpirun["wait_for"])
        argv = mpirun["argv"]
        self.assertEqual(["mpirun", "--host", "algo-1:1,algo-2:1", "-np", "2"], argv[:5])
        joined = " ".join(argv)
        for option in ("-mca btl_tcp_if_include eth0", "-mca plm_rsh_no_tree_spawn 1", "-mca mpi_yield_when_idle 1",
                       "-x HOROVOD_CONTROLLER=mpi", "-x PYTHONPATH"):
            self.assertIn(option, joined)
        self.assertEqual("deepfm.train", argv[argv.index(sys.executable) + 2])
        plain = [v for v in bench.all_variants() if v.name == "hybrid+mpi"][0]
        self.assertNotIn("mpi_yield_when_idle", " ".join(bench.host_processes(
            plain, config, self.get_temp_dir(), 0)[1]["argv"]))
        with self.assertRaisesRegex(ValueError, "hybrid\\+mpi_yield: mpirun starts ranks over ssh .* emulated"):
            bench.host_processes(variant, config, self.get_temp_dir(), 0, local_hosts=True)

    def test_a_host_waits_for_the_ports_it_needs_and_names_a_silent_one(self):
        with self.assertRaisesRegex(TimeoutError, "nothing listens on 127.0.0.1:1 after 0 s"):
            supervisor.wait_for_ports(["127.0.0.1:1"], 0.2)

    def test_a_host_whose_ports_never_open_ends_saying_why_and_releases_the_others(self):
        work = self.get_temp_dir()
        spec = {"processes": [{"name": "algo-1_mpirun", "argv": ["true"], "env": {}, "log": os.path.join(work, "m.log"),
                               "wait_for": ["127.0.0.1:1"]}],
                "interface": None, "output": os.path.join(work, "host.json"), "cwd": work,
                "done_file": os.path.join(work, "done")}
        with open(os.path.join(work, "spec.json"), "w") as f:
            json.dump(spec, f)
        # The supervisor, a process of its own in the benchmark, sets SIGTERM's handler: this test process's comes back.
        self.addCleanup(signal.signal, signal.SIGTERM, signal.getsignal(signal.SIGTERM))
        with mock.patch.object(supervisor, "RENDEZVOUS_WAIT_S", 0.2):
            self.assertEqual(1, supervisor.run_host(os.path.join(work, "spec.json")))
        with open(spec["output"]) as f:
            self.assertIn("algo-1_mpirun: nothing listens on 127.0.0.1:1", json.load(f)["failed"])
        # The hosts that wait for this one's done file end too.
        self.assertTrue(os.path.exists(spec["done_file"]))


class IdCapacityTest(tf.test.TestCase):

    def test_capacity_is_the_most_distinct_ids_with_a_margin_rounded_up(self):
        self.assertEqual(3136, bench.id_capacity(2813))
        self.assertEqual(bench.ID_CAPACITY_MULTIPLE, bench.id_capacity(1))

    def test_distinct_ids_per_owner_of_real_batches(self):
        data = self.create_tempdir().full_path
        synthetic.generate(ROWS, data, feature_size=FEATURE_SIZE, seed=0)
        most, mean = bench.distinct_ids_per_owner(data, 64, 2)
        # A batch of 64 rows x 39 ids, split over 2 owners: each gets some, at most all of them.
        self.assertGreater(mean, 1)
        self.assertLessEqual(mean, most)
        self.assertLessEqual(most, 64 * 39)

    def test_the_capacity_variant_gets_the_measured_capacity(self):
        config = _config(variants="hybrid+capacity")
        (variant,) = config.variants
        with self.assertRaisesRegex(ValueError, "hybrid\\+capacity needs the measured id capacity"):
            bench.host_processes(variant, config, self.get_temp_dir(), 0)
        (process,) = bench.host_processes(variant, dataclasses.replace(config, id_capacity=320),
                                          self.get_temp_dir(), 0)
        self.assertEqual("320", process["argv"][process["argv"].index("--id_capacity") + 1])


class MeasureRunTest(tf.test.TestCase):

    def test_rates_bytes_and_cpu_in_the_window(self):
        config = _config(variants="horovod")
        (variant,) = config.variants
        work = self.get_temp_dir()
        # Both ranks: step 10 at t=10, step 30 at t=12 -> window 10..12 s, 20 steps each.
        for name in ("rank0", "rank1"):
            _write_progress(os.path.join(work, bench.PROGRESS_DIR, name + ".jsonl"),
                            [(0.0, 0), (10.0, 10), (12.0, 30)])
        for index, host in enumerate(bench.HOST_NAMES):
            # tx grows 1 MB per second (2 MB in the window), rx 0.5; the rank uses 0.8 CPU-s per second.
            counters = [(t, 1e6 * t, 0.5e6 * t) for t in (0.0, 10.0, 12.0)]
            cpu = [(t, 0.8 * t) for t in (0.0, 10.0, 12.0)]
            with open(os.path.join(work, bench.HOST_OUTPUT % host), "w") as f:
                json.dump({"counters": counters, "failed": None, "processes": {"rank%d" % index: cpu}}, f)
        with open(os.path.join(work, "metrics.json"), "w") as f:
            json.dump({"auc": 0.7}, f)
        # The machine was busy 2.1 cores in the window: 0.5 cores beyond the job's 2 x 0.8.
        machine = [(t, 2.1 * t) for t in (0.0, 10.0, 12.0)]
        result = bench.measure_run(variant, config, work, machine)
        self.assertAllClose(2 * 20 * bench.BATCH / 2.0, result.examples_per_sec)
        self.assertAllClose([20.0, 20.0], result.steps)
        self.assertAllClose(2e6 / 20, result.tx_bytes_per_step)
        self.assertAllClose(100.0, result.step_ms)
        self.assertAllClose(1000 * 1.6 / 20, result.cpu_ms_per_step)
        self.assertAllClose(1000 * 3.2 / (40 * bench.BATCH), result.cpu_seconds_per_1k)
        self.assertEqual(0.7, result.auc)
        self.assertAllClose(0.5, result.other_cores)
        self.assertEqual({}, result.traces)
        self.assertIsNone(bench.measure_run(variant, config, work).other_cores)


def _single_and_horovod_runs():
    return {"single": [bench.RunResult(
                examples_per_sec=100.0, window_s=2.0, steps=[20.0], cpu_seconds={"single": 1.8},
                tx_bytes=[0.0], rx_bytes=[0.0], host_cpu_seconds=[1.8], auc=0.7, machine_busy_s=2.0)],
            "horovod": [bench.RunResult(
                examples_per_sec=150.0, window_s=2.0, steps=[10.0, 10.0], cpu_seconds={"r0": 1.9, "r1": 1.9},
                tx_bytes=[1e6, 1e6], rx_bytes=[1e6, 1e6], host_cpu_seconds=[1.9, 1.9], auc=0.69,
                machine_busy_s=3.9)]}


class ReportOnlyTest(tf.test.TestCase):

    def test_results_json_round_trips(self):
        config = _config(variants="single,horovod")
        runs = _single_and_horovod_runs()
        breakdown = {"span_ms": 80.0, "compute_ms": 50.0, "exchange_only_ms": 20.0, "idle_ms": 10.0,
                     "gradients_done_ms": 45.0, "op_ms_by_scope": {"gradients": 30.0}}
        path = os.path.join(self.get_temp_dir(), "results.json")
        with open(path, "w") as f:
            json.dump({"results": bench.raw_results(config, runs, {"single": [], "horovod": ["x"]},
                                                    {"horovod": {"rank0": breakdown}}, (1.0, 2.0))}, f)
        results, failures, traced = bench.load_results(path)
        self.assertEqual(runs, results)
        self.assertEqual(["x"], failures["horovod"])
        self.assertEqual({"horovod": {"rank0": breakdown}}, traced)
        self.assertAllClose(0.05, results["horovod"][0].other_cores)
        body = bench.report_body(config, results, failures, None, traced)
        self.assertNotIn("load average", body)
        self.assertIn("0.75 (0.75-0.75)", body)
        # The traced step: 80 ms, of which 35 after the backward pass ended.
        self.assertIn("| horovod | rank0 | 80.0 | 50.0 | 20.0 | 10.0 | 35.0 | gradients 30.0 |", body)

    def test_a_report_written_again_names_the_machine_it_was_measured_on(self):
        flags = ["--variants", "single,horovod", "--runs", "1", "--steps", str(STEPS), "--warmup_steps", str(WARMUP)]
        config = bench.make_config(bench.parse_args(flags))
        results_dir = self.get_temp_dir()
        measured_on = {"date": "2020-01-02 03:04 UTC", "cpu": "the recorded cpu"}
        common.write_report("first", "Scale-out", "", measured_on,
                            bench.raw_results(config, _single_and_horovod_runs(), {}), results_dir=results_dir)
        self.assertEqual(0, bench.main(flags + ["--report_only", os.path.join(results_dir, "first.json"),
                                                "--results_dir", results_dir, "--name", "again"]))
        with open(os.path.join(results_dir, "again.md")) as f:
            report = f.read()
        self.assertIn("- date: 2020-01-02 03:04 UTC\n", report)
        self.assertIn("- cpu: the recorded cpu\n", report)
        self.assertIn("0.75 (0.75-0.75)", report)
        with open(os.path.join(results_dir, "again.json")) as f:
            self.assertEqual("the recorded cpu", json.load(f)["machine"]["cpu"])


class TargetTextTest(tf.test.TestCase):

    def _run(self, rate, auc):
        return bench.RunResult(examples_per_sec=rate, window_s=1.0, steps=[1.0], cpu_seconds={}, tx_bytes=[0.0],
                               rx_bytes=[0.0], host_cpu_seconds=[1.0], auc=auc, machine_busy_s=1.0)

    def test_the_best_at_the_defaults_and_of_every_variant(self):
        config = _config(variants="single,hybrid,ps+dedup")
        results = {"single": [self._run(100.0, 0.72)], "hybrid": [self._run(160.0, 0.70)],
                   "ps+dedup": [self._run(182.0, 0.7215)]}
        body = bench.report_body(config, results, {}, None)
        self.assertIn("Target, best multi-host strategy at the defaults `hybrid` (per-replica batch 1,024): "
                      "efficiency 0.80 (target >= 0.75: met); AUC -0.0200 vs `single`'s (target at most 0.002 "
                      "below: not met).", body)
        self.assertIn("Best of every variant: `ps+dedup` (--dedup_lookups): efficiency 0.91 (target >= 0.75: met); "
                      "AUC +0.0015 vs `single`'s (target at most 0.002 below: met).", body)

    def test_an_auc_above_the_reference_meets_the_target(self):
        config = _config(variants="single,hybrid,horovod")
        results = {"single": [self._run(100.0, 0.72)], "hybrid": [self._run(160.0, 0.7300)],
                   "horovod": [self._run(150.0, 0.7215)]}
        body = bench.report_body(config, results, {}, None)
        self.assertIn("AUC +0.0100 vs `single`'s (target at most 0.002 below: met)", body)
        self.assertIn("`hybrid`'s AUC +0.0085 vs `horovod`'s (target at most 0.003 below: met).", body)
        results["hybrid"] = [self._run(160.0, 0.7170)]
        body = bench.report_body(config, results, {}, None)
        self.assertIn("AUC -0.0030 vs `single`'s (target at most 0.002 below: not met)", body)
        self.assertIn("`hybrid`'s AUC -0.0045 vs `horovod`'s (target at most 0.003 below: not met).", body)

    def test_no_second_sentence_where_the_defaults_are_the_best(self):
        config = _config(variants="single,hybrid,ps+dedup")
        results = {"single": [self._run(100.0, 0.72)], "hybrid": [self._run(160.0, 0.72)],
                   "ps+dedup": [self._run(120.0, 0.72)]}
        body = bench.report_body(config, results, {}, None)
        self.assertIn("at the defaults `hybrid`", body)
        self.assertNotIn("Best of every variant", body)


class RoundEfficiencyTest(tf.test.TestCase):

    def _run(self, rate, round_index):
        return bench.RunResult(examples_per_sec=rate, window_s=1.0, steps=[1.0], cpu_seconds={}, tx_bytes=[0.0],
                               rx_bytes=[0.0], host_cpu_seconds=[0.0], round=round_index)

    def test_each_round_is_divided_by_its_own_reference(self):
        horovod = [v for v in bench.all_variants() if v.name == "horovod"][0]
        # The machine ran twice as fast in round 1: per round both are 0.75.
        runs = [self._run(150.0, 0), self._run(300.0, 1), self._run(999.0, 2)]
        single = [self._run(100.0, 0), self._run(200.0, 1)]
        stats = bench.round_efficiencies(horovod, runs, single)
        self.assertEqual([0.75, 0.75], stats.values)
        self.assertIsNone(bench.round_efficiencies(horovod, runs, []))


class RunRoundsTest(tf.test.TestCase):
    """The rounds' order and deadline, with each run a given function of its variant (no processes)."""

    def _result(self, rate):
        return bench.RunResult(examples_per_sec=rate, window_s=1.0, steps=[1.0], cpu_seconds={}, tx_bytes=[0.0],
                               rx_bytes=[0.0], host_cpu_seconds=[0.0])

    def test_interleaved_rounds_and_failures(self):
        config = _config(variants="single,hybrid")
        jobs = [runner.Job(v.name, config, v) for v in config.variants]
        calls, written = [], []

        def run_one(variant, run_config, hosts, order=None, timeout_s=None):
            del run_config, hosts, order
            calls.append((variant.name, timeout_s))
            if variant.name == "hybrid" and len(calls) == 2:
                raise RuntimeError("hybrid: host exit codes [1, 0]")
            return self._result(100.0)

        rounds = runner.run_rounds(jobs, None, 2, order=[0, 1], on_run=lambda r: written.append(len(r.results)),
                                   run_one=run_one)
        self.assertEqual(["single", "hybrid", "single", "hybrid"], [name for name, _ in calls])
        self.assertEqual([0, 1], [r.round for r in rounds.results["single"]])
        self.assertEqual([1], [r.round for r in rounds.results["hybrid"]])
        self.assertEqual(["hybrid: host exit codes [1, 0]"], rounds.failures["hybrid"])
        self.assertLen(written, 4)

    def test_runs_that_would_end_after_the_deadline_are_skipped(self):
        config = _config(variants="single,hybrid")
        jobs = [runner.Job(v.name, config, v) for v in config.variants]
        clock = [1000.0]
        calls = []

        def run_one(variant, run_config, hosts, order=None, timeout_s=None):
            del run_config, hosts, order
            calls.append((variant.name, timeout_s))
            clock[0] += 40.0 if variant.name == "single" else 70.0
            return self._result(100.0)

        with mock.patch.object(runner.time, "monotonic", lambda: clock[0]):
            rounds = runner.run_rounds(jobs, None, 3, order=[0, 1], deadline=1000.0 + 200.0, run_one=run_one)
        # Round 0: single (40 s), hybrid (70 s); round 1: single fits (90 s left), hybrid (70 s) does not
        # after it (50 s left); round 2: nothing fits in 50 s but single's 40 s.
        self.assertEqual([("single", 200.0), ("hybrid", 160.0), ("single", 90.0), ("single", 50.0)], calls)
        self.assertEqual([1, 2], rounds.skipped["hybrid"])
        self.assertEqual([], rounds.skipped["single"])


class MeasureTest(tf.test.TestCase):
    """`measure`: the timed rounds, then a traced run of every variant (each run a function of its variant)."""

    def test_timed_rounds_then_a_traced_run_of_every_variant(self):
        config = _config(variants="single,hybrid", trace_steps=2)
        calls = []

        def run_variant(variant, run_config, hosts, traced=False, order=None, timeout_s=None):
            del run_config, hosts, order, timeout_s
            calls.append((variant.name, traced))
            if traced and variant.name == "hybrid":
                raise RuntimeError("hybrid: host exit codes [1, 0]")
            return bench.RunResult(examples_per_sec=100.0, window_s=1.0, steps=[1.0], cpu_seconds={},
                                   tx_bytes=[0.0], rx_bytes=[0.0], host_cpu_seconds=[0.0],
                                   traces={"main": {"exchange_only_ms": 0.0}} if traced else {})

        with mock.patch.object(runner, "run_variant", run_variant):
            results, failures, traced = bench.measure(config, hosts=object(), order=[0, 1])
        self.assertEqual([("single", False), ("hybrid", False), ("single", True), ("hybrid", True)], calls)
        self.assertEqual([{}], [run.traces for run in results["single"]])
        self.assertLen(results["hybrid"], 1)
        self.assertEqual({"single": {"main": {"exchange_only_ms": 0.0}}}, traced)
        self.assertEqual({"single": [], "hybrid": ["traced run: hybrid: host exit codes [1, 0]"]}, failures)
        with mock.patch.object(runner, "run_variant", run_variant):
            bench.measure(dataclasses.replace(config, trace_steps=0), hosts=object(), order=[0, 1])
        # Without trace steps, no traced run.
        self.assertEqual([("single", False), ("hybrid", False)], calls[4:])


class SigtermTest(tf.test.TestCase):

    def test_a_sigterm_ends_the_benchmark_through_its_cleanups(self):
        marker = os.path.join(self.get_temp_dir(), "cleaned")
        child = subprocess.Popen(
            [sys.executable, "-c", "import signal, sys\n"
             "from benchmarks import scale_out\n"
             "scale_out.exit_on_sigterm()\n"
             "try:\n"
             "    print('ready', flush=True)\n"
             "    signal.pause()\n"
             "finally:\n"
             "    open(sys.argv[1], 'w').close()\n", marker],
            stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT)
        try:
            self.assertEqual("ready", child.stdout.readline().strip())
            child.send_signal(signal.SIGTERM)
            self.assertEqual(128 + signal.SIGTERM, child.wait(timeout=120))
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
            child.stdout.close()
        self.assertTrue(os.path.exists(marker))


class OpenHostsTest(tf.test.TestCase):

    def test_auto_makes_emulated_hosts_where_a_command_runs_in_them_else_local_ones(self):
        from benchmarks.scale_out import hosts as run_hosts
        reason = hosts_lib.check_privileges()
        with run_hosts.open_hosts(bench.HOSTS_AUTO, 2, 0.0) as made:
            self.assertEqual(bench.HOSTS_LOCAL if reason else bench.HOSTS_EMULATED, made.mode)
            self.assertEqual(("algo-1", "algo-2"), made.names)
            if not reason:
                run_hosts.probe(made)
                with self.assertRaisesRegex(hosts_lib.HostSetupError, "a command in an emulated host exited with 1"):
                    run_hosts.probe(made, argv=["false"])
            else:
                self.assertIn("emulated hosts could not be made", made.note)
        with run_hosts.open_hosts(bench.HOSTS_LOCAL, 2, 0.0) as made:
            self.assertEqual((None, "lo"), (made.interface_of(1), made.interface_of(0)))
            self.assertEqual("127.0.0.1", made.address("algo-2"))


class HostMemoryTest(tf.test.TestCase):
    """`--host_memory`: each host's run in a memory cgroup of that limit; a host killed for memory is reported."""

    def test_a_bad_host_memory_is_refused_with_the_value(self):
        with self.assertRaisesRegex(ValueError, r"--host_memory 'plenty' is not a size"):
            _config(host_memory="plenty")

    def test_a_host_over_its_limit_is_killed_and_named_and_its_cgroup_removed(self):
        from benchmarks.scale_out import hosts as run_hosts
        from jobs.local import memory
        try:
            memory.find_controller()
        except memory.MemoryLimitError as e:
            self.skipTest("memory cgroups cannot be made here: %s" % e)
        mode = bench.HOSTS_LOCAL if hosts_lib.check_privileges() else bench.HOSTS_EMULATED
        work = self.get_temp_dir()
        allocate = "b = bytearray(300 * 1024 * 1024)\nfor i in range(0, len(b), 4096): b[i] = 1"
        with run_hosts.open_hosts(mode, 2, 0.0, host_memory="150m") as made:
            fits = made.start(0, [sys.executable, "-c", "b = bytearray(20 * 1024 * 1024)"],
                              {"PATH": os.environ.get("PATH", "")}, (), "/", work, os.path.join(work, "a.log"))
            over = made.start(1, [sys.executable, "-c", allocate], {"PATH": os.environ.get("PATH", "")}, (), "/",
                              work, os.path.join(work, "b.log"))
            self.assertEqual(0, fits.wait(60))
            self.assertNotEqual(0, over.wait(60))
            self.assertRegex(made.memory_report(), r"^; killed for memory: host algo-2's processes peaked at 1\d\d MiB "
                                                   r"against its limit of 150 MiB \(150m\); raise --host_memory")
            self.assertEqual("", made.memory_report())
            paths = [cgroup.path for cgroup in made.memory.cgroups]
            self.assertLen(paths, 2)
        self.assertEqual([], [path for path in paths if os.path.exists(path)])


@pytest.mark.slow
class RealRunTest(tf.test.TestCase):
    """`single`, `horovod`, `hybrid` and `hybrid` over MPI started by ssh on two real emulated hosts, a few steps."""

    def test_single_and_horovod_run_and_are_measured(self):
        reason = hosts_lib.check_privileges()
        if reason:
            self.skipTest(reason)
        from benchmarks.scale_out import hosts as run_hosts
        data = self.create_tempdir().full_path
        synthetic.generate(ROWS, data, feature_size=FEATURE_SIZE, seed=0)
        config = _config(variants="single,horovod,hybrid,hybrid+mpi_yield", data_dir=data, link_gbps=10,
                         trace_steps=2, batch_size=RUN_BATCH)

        def run_one(variant, run_config, hosts, order=None, timeout_s=None):
            # One run of each variant, timed and (but the run over ssh) traced: its result serves as both
            # (`measure`'s separate traced runs are checked in MeasureTest).
            return bench.run_variant(variant, run_config, hosts, traced=variant.name in TRACED_VARIANTS,
                                     order=order, timeout_s=timeout_s)

        with run_hosts.open_hosts(config.hosts_mode, config.num_hosts, config.link_gbps) as made:
            rounds = runner.run_rounds([runner.Job(v.name, config, v) for v in config.variants], made, config.runs,
                                       run_one=run_one)
        results, failures = rounds.results, rounds.failures
        traced = {name: runs[0].traces for name, runs in results.items() if name in TRACED_VARIANTS}
        self.assertEqual({"single": [], "horovod": [], "hybrid": [], "hybrid+mpi_yield": []}, failures)
        horovod = results["horovod"][0]
        self.assertGreater(horovod.examples_per_sec, 0)
        # Horovod's exchange crossed each host's link in the window; single has no second host.
        self.assertLen(horovod.tx_bytes, 2)
        self.assertGreater(min(horovod.tx_bytes), 0)
        self.assertIsNotNone(horovod.auc)
        self.assertLen(results["single"][0].tx_bytes, 1)
        self.assertIsNotNone(horovod.other_cores)
        # The traced run: each rank waited on Horovod's exchange with nothing else to run; single never.
        self.assertCountEqual(["rank0", "rank1"], traced["horovod"])
        self.assertGreater(traced["horovod"]["rank0"]["exchange_only_ms"], 0.0)
        self.assertEqual(0.0, traced["single"]["main"]["exchange_only_ms"])
        self.assertIn("Where a step goes", bench.report_body(config, results, failures, (0.0, 0.0), traced))
        # The hybrid's ranks exchanged rows and gradients over their hosts' links, and evaluated.
        hybrid = results["hybrid"][0]
        self.assertGreater(min(hybrid.tx_bytes), 0)
        self.assertIsNotNone(hybrid.auc)
        self.assertGreater(traced["hybrid"]["rank1"]["exchange_only_ms"], 0.0)
        # mpirun on algo-1 started a rank in each host over ssh: both links carried the exchange.
        over_ssh = results["hybrid+mpi_yield"][0]
        self.assertGreater(min(over_ssh.tx_bytes), 0)
        self.assertLen(over_ssh.steps, 2)
        self.assertIsNotNone(over_ssh.auc)


if __name__ == "__main__":
    tf.test.main()
