"""Tests of the soak: its seeded schedules, its window detection, and a short soak of every strategy.

The short soak (`ShortSoak*Test`, slow) runs each strategy's job twice on tiny
data, once under two or three faults, with every check of `benchmarks.soak`:
together the three schedules hold every kind of fault. Its `ps` jobs have
one training task: asynchronous updates of two would make the AUC of two
fault-free runs differ by more than the tolerance on data this small (the
long soak, `make soak`, runs two and reports their spread).
"""

import json
import math
import os
import re
import threading
import time

import pytest
import tensorflow as tf
from absl.testing import parameterized

from benchmarks import common, soak, soak_checks, soak_view
from benchmarks import soak_faults as faults
from tests import command_line, paths

ROWS = 6000
FEATURE_SIZE = 2000
# A checkpoint of this many rows takes long enough to write (milliseconds) that the kill inside one lands
# on the first or second write; one of FEATURE_SIZE rows is often complete before the chief can be stopped.
FEATURE_SIZE_OF = {"ps": 50_000}
# Per strategy, the kinds of its faults (`kill_in_export` last where it is on): every kind once.
SHORT_KINDS = {
    "ps": (faults.KILL_IN_CHECKPOINT, faults.LOSE_PS),
    "horovod": (faults.TERM_TASK, faults.KILL_TASK),
    "hybrid": (faults.RESIZE, faults.RESIZE),
}
# The kill inside the export: `ps` here; every strategy's in the long soak (its last fault), kept out of the
# `hybrid` short soak, whose two resizes already cost the suite most of its time.
EXPORT_KILL = {"ps": True, "horovod": False, "hybrid": False}
# The AUC a job resized twice may differ by on this little data: it trains the same examples in other
# batches (192 rows a step at 3 ranks, 128 at 2), and on 6,000 rows other batches alone move the AUC by
# about 0.01 (the fault-free `horovod` and `hybrid` jobs, the same model and examples in other orders:
# 0.7528 and 0.7457; the short soak's resized job: +0.0118). The long soak (`make soak`) checks 0.005.
# The same bound holds its log loss.
RESIZED_AUC_TOLERANCE = 0.02
# Where the short soak's last fault lands at the latest: at 3 ranks a `hybrid` job of 6,000 rows and 2 epochs
# has about 8 steps after 0.92 of its budget, and on a loaded machine it can finish them before a signalled
# rank stops (the job then ends with a restart missing); before 0.6, about 25 steps remain.
SHORT_LAST_POINT = 0.6
# The epochs of each strategy's jobs. `hybrid`'s train 4: its resizes are signals, and on a machine loaded by
# other tests (three busy processes beside the job on 2 cores) the resize to 2 ranks, armed at 54% of the
# budget, stopped the ranks 10 to 20 steps after that point, the 3 ranks then training about 20 steps a second;
# at 2 epochs about 25 steps remained, and in a suite's run the job once ended before the signal landed.
# At 4 epochs about 50 remain (measured under that load: signalled at step 96, stopped at 112 of 153).
EPOCHS = 2
EPOCHS_OF = {"hybrid": 4}
AUC_CHECK = "AUC within %.3f of the reference" % soak.AUC_TOLERANCE
LOGLOSS_CHECK = "log loss within %.3f of the reference" % soak.LOGLOSS_TOLERANCE


class ScheduleTest(tf.test.TestCase, parameterized.TestCase):

    @parameterized.parameters("ps", "horovod", "hybrid")
    def test_a_seed_gives_the_same_schedule_every_time(self, strategy):
        first = faults.schedule(7, strategy, 20)
        self.assertEqual(first, faults.schedule(7, strategy, 20))
        self.assertNotEqual(first, faults.schedule(8, strategy, 20))
        self.assertLen(first, 20)
        # Every kind of the strategy, the points in order inside the budget (the kills at the end at 1.0), the
        # export kill last.
        self.assertEqual(set(faults.KINDS_OF[strategy]), {f.kind for f in first[:-1]})
        points = [f.point for f in first[:-1]]
        self.assertEqual(sorted(points), points)
        in_training = [f.point for f in first[:-1] if f.kind not in faults.AT_THE_END]
        self.assertTrue(all(faults.FIRST_POINT <= p <= faults.LAST_POINT for p in in_training), points)
        self.assertEqual(faults.Fault(faults.KILL_IN_EXPORT, 1.0, 0), first[-1])

    @parameterized.parameters("ps", "horovod", "hybrid")
    def test_twenty_faults_hold_every_new_kind_at_least_twice_where_they_can_land(self, strategy):
        for seed in range(1, 11):
            schedule = faults.schedule(seed, strategy, 20)
            kinds = [f.kind for f in schedule]
            for kind in (faults.KILL_IN_RESTORE, faults.KILL_IN_EVALUATION, faults.MEMORY):
                self.assertGreaterEqual(kinds.count(kind), 2, (seed, kinds))
            # A restore kill lands in the restart of the fault before it, at that fault's point.
            self.assertNotIn(kinds[0], faults.AFTER_A_RESTART)
            for before, fault in zip(schedule, schedule[1:]):
                if fault.kind in faults.AFTER_A_RESTART:
                    self.assertEqual(before.point, fault.point)
            # The evaluation kills come after every fault in training, before the export kill.
            ends = [index for index, kind in enumerate(kinds) if kind in faults.AT_THE_END]
            self.assertEqual(list(range(len(kinds) - 1 - len(ends), len(kinds) - 1)), ends, kinds)
            if strategy == "hybrid":
                self.assertTrue(any(a == faults.RESIZE and b == faults.KILL_IN_RESTORE
                                    for a, b in zip(kinds, kinds[1:])), (seed, kinds))

    def test_drawn_kinds_can_be_restricted(self):
        only = (faults.MEMORY, faults.KILL_IN_RESTORE, faults.KILL_IN_EVALUATION)
        kinds = [f.kind for f in faults.schedule(1, "horovod", 7, only=only)]
        self.assertEqual(set(only) | {faults.KILL_IN_EXPORT}, set(kinds))
        self.assertEqual(faults.MEMORY, kinds[0])
        with self.assertRaisesRegex(ValueError, "strategy horovod has none of the kinds lose_ps"):
            faults.schedule(1, "horovod", 3, only=(faults.LOSE_PS,))
        # Alone, a restore kill has no restart to land in: the first becomes a kill of a task.
        self.assertEqual([faults.KILL_TASK, faults.KILL_IN_RESTORE],
                         [f.kind for f in faults.schedule(1, "ps", 2, export_kill=False,
                                                          only=(faults.KILL_IN_RESTORE,))])

    def test_resizes_alternate_between_two_and_three_ranks(self):
        sizes = [f.size for f in faults.schedule(3, "hybrid", 20) if f.kind == faults.RESIZE]
        self.assertEqual([3, 2, 3], sizes)

    def test_the_last_point_bounds_the_faults(self):
        points = [f.point for f in faults.schedule(1, "hybrid", 5, export_kill=False, last_point=0.6)
                  if f.kind not in faults.AT_THE_END]
        self.assertTrue(all(faults.FIRST_POINT <= p <= 0.6 for p in points), points)
        self.assertGreater(max(points), 0.5)
        with self.assertRaisesRegex(ValueError, "--last_point must be in .*got 0.05"):
            faults.schedule(1, "hybrid", 2, last_point=0.05)

    def test_kinds_can_be_given(self):
        schedule = faults.schedule(1, "ps", 3, kinds=(faults.LOSE_PS, faults.KILL_TASK))
        self.assertEqual([faults.LOSE_PS, faults.KILL_TASK, faults.KILL_IN_EXPORT], [f.kind for f in schedule])
        with self.assertRaisesRegex(ValueError, "strategy horovod: kinds lose_ps must be 1 of"):
            faults.schedule(1, "horovod", 2, kinds=(faults.LOSE_PS,))
        with self.assertRaisesRegex(ValueError, "kill_in_restore lands in the restart of the fault before it"):
            faults.schedule(1, "ps", 3, kinds=(faults.KILL_IN_RESTORE, faults.KILL_TASK))
        with self.assertRaisesRegex(ValueError, "kill_in_evaluation lands at the job's end"):
            faults.schedule(1, "ps", 3, kinds=(faults.KILL_IN_EVALUATION, faults.KILL_TASK))
        given = faults.schedule(1, "hybrid", 4, kinds=(faults.RESIZE, faults.KILL_IN_RESTORE,
                                                       faults.KILL_IN_EVALUATION))
        self.assertEqual([given[0].point, 1.0, 1.0], [f.point for f in given[1:]])


class AucCheckTest(tf.test.TestCase):

    def job(self, auc, steps):
        """A finished job whose progress directory holds `steps`: per task, its records' steps over its starts."""
        progress = self.create_tempdir().full_path
        for task, records in steps.items():
            with open(os.path.join(progress, task + ".jsonl"), "w") as f:
                f.writelines(json.dumps({"step": step, "global_step": 0, "time": 0}) + "\n" for step in records)
        return soak.JobResult(strategy="", faulted=False, metrics={"auc": auc}, dirs={"progress": progress})

    def test_the_steps_of_every_start_are_added_up(self):
        job = self.job(0.7, {"chief_0": [5, 10, 15, 5, 10], "worker_0": [5, 5, 5, 10]})
        self.assertEqual({"chief_0": 25, "worker_0": 20}, soak_checks.steps_per_task(job.dirs["progress"]))

    def test_a_synchronous_job_is_checked_both_ways_an_asynchronous_one_for_a_loss(self):
        references = [self.job(0.700, {"rank_0": [5]}), self.job(0.690, {"rank_0": [5]})]
        for strategy in ("horovod", "hybrid"):
            self.assertTrue(soak_checks.check_auc(strategy, references, self.job(0.704, {})).passed)
            self.assertFalse(soak_checks.check_auc(strategy, references, self.job(0.706, {})).passed)
            self.assertFalse(soak_checks.check_auc(strategy, references, self.job(0.684, {})).passed)
        above = soak_checks.check_auc("ps", references, self.job(0.730, {"chief_0": [5, 10], "worker_0": [5]}))
        self.assertTrue(above.passed, above)
        self.assertIn("steps per task: chief_0 10, worker_0 5; fault-free: rank_0 5", above.detail)
        self.assertFalse(soak_checks.check_auc("ps", references, self.job(0.684, {})).passed)
        self.assertFalse(soak_checks.check_auc("ps", references, soak.JobResult(strategy="ps", faulted=True)).passed)


class LoglossCheckTest(tf.test.TestCase):

    def job(self, logloss):
        return soak.JobResult(strategy="", faulted=False, metrics={"logloss": logloss} if logloss else {})

    def test_the_base_rate_is_the_log_loss_of_the_positive_rate(self):
        data_dir = self.create_tempdir().full_path
        os.makedirs(os.path.join(data_dir, "validation"))
        for part, labels in enumerate(([1, 0, 0], [0])):
            with open(os.path.join(data_dir, "validation", "part-%05d.libsvm" % part), "w") as f:
                f.writelines("%d 1:0.5 20:1\n" % label for label in labels)
        self.assertAllClose(-(0.25 * math.log(0.25) + 0.75 * math.log(0.75)), soak_checks.base_rate_logloss(data_dir))
        with self.assertRaisesRegex(ValueError, "no base rate in .*0 labelled row"):
            soak_checks.base_rate_logloss(self.create_tempdir().full_path)

    def test_every_fault_free_run_must_beat_the_base_rate(self):
        self.assertTrue(soak_checks.check_base_rate([self.job(0.49), self.job(0.50)], 0.5623).passed)
        failed = soak_checks.check_base_rate([self.job(0.49), self.job(0.57)], 0.5623)
        self.assertFalse(failed.passed)
        self.assertEqual("0.4900, 0.5700 against 0.5623 (predicting the positive rate)", failed.detail)
        self.assertFalse(soak_checks.check_base_rate([self.job(None)], 0.5623).passed)

    def test_a_synchronous_job_is_checked_both_ways_an_asynchronous_one_for_a_loss(self):
        references = [self.job(0.500), self.job(0.510)]
        for strategy in ("horovod", "hybrid"):
            self.assertTrue(soak_checks.check_logloss(strategy, references, self.job(0.496)).passed)
            self.assertFalse(soak_checks.check_logloss(strategy, references, self.job(0.494)).passed)
            self.assertFalse(soak_checks.check_logloss(strategy, references, self.job(0.516)).passed)
        self.assertTrue(soak_checks.check_logloss("ps", references, self.job(0.480)).passed)
        self.assertTrue(soak_checks.check_logloss("ps", references, self.job(0.514)).passed)
        self.assertFalse(soak_checks.check_logloss("ps", references, self.job(0.516)).passed)
        self.assertFalse(soak_checks.check_logloss("ps", references, self.job(None)).passed)


class ReportTest(tf.test.TestCase):

    def test_the_report_shows_the_log_losses_the_base_rate_and_the_faults_by_kind(self):
        record = {"number": 1, "fault": {"kind": faults.MEMORY, "size": 0}, "target": "host cgroup dfm-1-a-localhost",
                  "signal": "OOM kill", "elapsed": 30.0, "step_at_fault": 100, "checkpoint_at_fault": 80,
                  "placement": "armed", "restart": "restart 1: task rank was killed for memory", "resume_step": 80,
                  "steps_lost": 20}
        result = {"strategy": "horovod", "base_rate_logloss": 0.5623,
                  "references": [{"metrics": {"auc": 0.74, "logloss": 0.495}, "seconds": 40}],
                  "faulted": {"faults": [record, dict(record, number=2)], "restarts": 2, "seconds": 90,
                              "metrics": {"auc": 0.741, "logloss": 0.4952}},
                  "checks": [{"name": "a check", "passed": True, "detail": "fine"}]}
        text = soak.report(soak.SoakConfig(strategies=("horovod",)), "python -m benchmarks.soak", [result], 60)
        self.assertIn("| horovod | 2 | 2 | 40 (max 20) | 0.7400 | 0.7410 | +0.0010 | 0.4950 | 0.4952 | 0.5623 |", text)
        self.assertIn("Faults by kind: memory 2.", text)
        self.assertIn("| 1 | memory | host cgroup dfm-1-a-localhost | OOM kill |", text)


class UnexpectedRestartTest(tf.test.TestCase):

    def test_a_restart_no_fault_caused_names_its_task_and_the_end_of_its_log(self):
        logs = self.create_tempdir().full_path
        os.makedirs(os.path.join(logs, "restart_1"))
        with open(os.path.join(logs, "restart_1", "ps_0.log"), "w") as f:
            f.write("starting\nUnknownError: Could not start gRPC server\n")
        output = self.create_tempfile(content=(
            "restart 1 of 3: task chief_0 failed with exit code -9 (killed by SIGKILL); every task was stopped; x\n"
            "restart 2 of 3: task ps_0 failed with exit code 1; every task was stopped; x\n"
            "restart 3 of 3: task chief_0 was killed for memory (exit code -9 (killed by SIGKILL)): host localhost's "
            "processes peaked at 1.2 GiB against its limit of 900 MiB (lowered); raise --host_memory; every task "
            "was stopped; x\n")).full_path
        view = soak_view.JobView(None, output, logs, "", "", "ps")
        found = soak.unexpected_restarts(view, [{"restart": "restart 1: task chief_0 failed with ..."},
                                                {"restart": "restart 3: task chief_0 was killed for memory ..."}])
        self.assertLen(found, 1)
        self.assertIn("restart 2 no fault caused: task ps_0 failed with exit code 1", found[0])
        self.assertIn("Could not start gRPC server", found[0])
        self.assertEqual((3, "chief_0"), view.restarts()[2][:2])
        self.assertStartsWith(view.restarts()[2][2], "was killed for memory (exit code -9")


class CommandLineTest(tf.test.TestCase):
    """`python -m benchmarks.soak`: flags generated from `SoakConfig` and `SoakCommand`, checked at start."""

    def test_a_bad_value_is_named_before_anything_runs(self):
        done = command_line.run(command_line.python_module("benchmarks.soak", "--kinds", "ps"), paths.REPO_ROOT)
        self.assertEqual(1, done.returncode, done.stderr)
        self.assertIn("benchmarks.soak: error: --kinds 'ps': 'ps' is not STRATEGY=KIND+KIND", done.stderr)
        for values, message in (({"strategies": ("ps", "mirrored")}, "--strategies: unknown mirrored"),
                                ({"faults": 0}, "--faults must be >= 1, got 0")):
            with self.assertRaisesRegex(ValueError, message):
                soak.SoakConfig(**values)

    def test_the_flags_are_the_configs_fields(self):
        done = command_line.run(command_line.python_module("benchmarks.soak", "--help"), paths.REPO_ROOT)
        self.assertEqual(0, done.returncode, done.stderr)
        self.assertTrue(done.stdout.startswith("A soak:"), done.stdout[:200])
        for flag in ("--faults", "--seed", "--strategies", "--fault_kinds", "--[no]export_kill", "--kinds", "--name",
                     "--work_dir"):
            self.assertIn(flag, done.stdout)


class WindowTest(tf.test.TestCase):

    def test_the_watch_sees_a_save_directory_as_it_appears(self):
        directory = self.create_tempdir().full_path
        with soak_view.DirectoryWatch(directory) as watch:
            self.assertEqual([], watch.names(0.05))
            timer = threading.Timer(0.2, os.mkdir, [os.path.join(directory, "model.ckpt-40_temp")])
            timer.start()
            start = time.monotonic()
            names = watch.names(5.0)
            timer.join()
        self.assertEqual(["model.ckpt-40_temp"], names)
        self.assertLess(time.monotonic() - start, 2.0)

    def test_the_examples_of_a_step_follow_the_position_record(self):
        model_dir = self.create_tempdir().full_path
        with open(os.path.join(model_dir, "input_position.json"), "w") as f:
            f.write('{"format_version": 1, "segments": [{"from_step": 0, "examples_per_step": 256}, '
                    '{"from_step": 40, "examples_per_step": 384}]}')
        self.assertEqual(30 * 256, soak_view.examples_at(model_dir, 30))
        self.assertEqual(40 * 256 + 10 * 384, soak_view.examples_at(model_dir, 50))


def shared_data(config):
    """The synthetic rows of `config`, written once per test process and shared by the short soaks on them.

    The `horovod` and `hybrid` soaks' rows are the same (FEATURE_SIZE ids), and their jobs only read them;
    the data check's record beside them (`input_pipeline.check_record`) spares every start after the first
    on unchanged files from reading them again. So the soak after the first in a test process neither writes
    nor checks them (a fresh copy cost its fault-free job about 4 s of CPU, and checked nothing more).
    """
    root = os.path.join(tf.compat.v1.test.get_temp_dir(), "soak_data_%d_rows_%d_ids_seed_%d" % (
        config.rows, config.feature_size, config.seed))
    common.ensure_data(root, config.rows, config.feature_size, seed=config.seed)
    return root


class ShortSoak:
    """Each strategy's job under two or three faults loses nothing (`benchmarks.soak`'s checks).

    One class per strategy, so that the suite's two processes can take them apart.
    """

    strategy = ""

    def test_faults_lose_nothing(self):
        strategy = self.strategy
        work_dir = self.create_tempdir().full_path
        config = soak.SoakConfig(strategies=(strategy,), faults=len(SHORT_KINDS[strategy]) + EXPORT_KILL[strategy],
                                 seed=1, rows=ROWS, feature_size=FEATURE_SIZE_OF.get(strategy, FEATURE_SIZE),
                                 epochs=EPOCHS_OF.get(strategy, EPOCHS), batch_size=64,
                                 checkpoint_steps=10, work_dir=work_dir, wait_s=300,
                                 kinds={strategy: SHORT_KINDS[strategy]}, export_kill=EXPORT_KILL[strategy],
                                 ps_workers=1, last_point=SHORT_LAST_POINT)
        result = soak.soak_strategy(config, strategy, shared_data(config))
        resized = faults.RESIZE in SHORT_KINDS[strategy]
        failed = ["%s: %s" % (c["name"], c["detail"]) for c in result["checks"]
                  if not c["passed"] and not (resized and c["name"] in (AUC_CHECK, LOGLOSS_CHECK))]
        self.assertEqual([], failed, result)
        if resized:
            for metric in ("auc", "logloss"):
                self.assertAllClose(result["references"][0]["metrics"][metric],
                                    result["faulted"]["metrics"][metric], atol=RESIZED_AUC_TOLERANCE)
        self.assertLen(result["checks"], 8)
        # The story: every fault in the schedule's order, each with its own restart.
        records = result["faulted"]["faults"]
        self.assertEqual([f["kind"] for f in result["schedule"]], [r["fault"]["kind"] for r in records])
        self.assertEqual(["restart %d" % n for n in range(1, len(records) + 1)],
                         [r["restart"].split(":")[0] for r in records])
        for record in records:
            if record["fault"]["kind"] in (faults.KILL_IN_CHECKPOINT, faults.KILL_IN_EXPORT):
                self.assertStartsWith(record["placement"], "inside the write of")
            if record["fault"]["kind"] == faults.RESIZE:
                self.assertIn("failed with exit code 75", record["restart"])
            if record["fault"]["kind"] == faults.LOSE_PS:
                # (tests/jobs/local/test_launcher.py's RestartTest leaves the killed parameter server to this.)
                self.assertRegex(record["restart"], r"task ps_\d+ failed with exit code -9 \(killed by SIGKILL\)")
        if strategy == "hybrid":
            with open(result["faulted"]["dirs"]["output"]) as f:
                sizes = [int(n) for n in re.findall(r"elastic: starting with (\d+) training worker", f.read())]
            # Started at 2 ranks, resized to 3, then 2 (and started again at 2 after an export kill).
            self.assertEqual([2, 3, 2] + [2] * EXPORT_KILL[strategy], sizes)
        report = soak.report(config, "python -m benchmarks.soak ...", [result], 1.0)
        self.assertIn("| %s | %d | %d |" % (strategy, len(records), len(records)), report)


@pytest.mark.slow
class ShortSoakPsTest(ShortSoak, tf.test.TestCase):
    strategy = "ps"


@pytest.mark.slow
class ShortSoakHorovodTest(ShortSoak, tf.test.TestCase):
    strategy = "horovod"


@pytest.mark.slow
class ShortSoakHybridTest(ShortSoak, tf.test.TestCase):
    strategy = "hybrid"


if __name__ == "__main__":
    tf.test.main()
