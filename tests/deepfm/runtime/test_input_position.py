"""Tests of deepfm.runtime.input_position: where a resumed run's input starts and what its budget still holds."""

import json
import os

import tensorflow as tf

from deepfm.runtime import input_position as position
from deepfm.runtime.input_position import Segment

BATCH = 64


class PlanTest(tf.test.TestCase):

    def test_a_new_run_starts_at_the_first_batch_and_trains_its_budget(self):
        plan = position.plan([], 0, 2 * BATCH, budget_steps=100, workers=2, batch=BATCH)
        self.assertEqual((0, 0, 100 * 2 * BATCH, 100, 0),
                         (plan.resumed_step, plan.examples_done, plan.examples_budget, plan.max_steps,
                          plan.skip_batches))
        self.assertFalse(plan.budget_reached)

    def test_a_synchronous_restart_skips_every_batch_its_steps_trained(self):
        # Two ranks at batch 64: each global step takes one batch of each rank.
        plan = position.plan([Segment(0, 2 * BATCH)], 40, 2 * BATCH, budget_steps=100, workers=2, batch=BATCH)
        self.assertEqual((40 * 2 * BATCH, 100, 40), (plan.examples_done, plan.max_steps, plan.skip_batches))

    def test_asynchronous_workers_each_skip_an_equal_share(self):
        # Parameter servers: each global step is one worker's batch; two workers reached step 40 together.
        plan = position.plan([Segment(0, BATCH)], 40, BATCH, budget_steps=200, workers=2, batch=BATCH)
        self.assertEqual((40 * BATCH, 200, 20), (plan.examples_done, plan.max_steps, plan.skip_batches))

    def test_a_resize_keeps_the_examples_of_the_budget(self):
        # 2 ranks trained 60 steps (120 batches); 3 ranks go on, whose own budget is 66 steps (198
        # batches: the passes dealt over 3): 78 batches left, 26 steps of 3 ranks.
        segments = [Segment(0, 2 * BATCH)]
        plan = position.plan(segments, 60, 3 * BATCH, budget_steps=66, workers=3, batch=BATCH)
        self.assertEqual(120 * BATCH, plan.examples_done)
        self.assertEqual(60 + 26, plan.max_steps)
        self.assertEqual(40, plan.skip_batches)  # 120 batches dealt over 3 ranks
        # And back to 2 ranks at step 70: 60 steps of 2 and 10 of 3.
        segments = [Segment(0, 2 * BATCH), Segment(60, 3 * BATCH)]
        plan = position.plan(segments, 70, 2 * BATCH, budget_steps=100, workers=2, batch=BATCH)
        self.assertEqual(150 * BATCH, plan.examples_done)
        self.assertEqual(70 + 25, plan.max_steps)
        self.assertEqual(75, plan.skip_batches)

    def test_a_run_resumed_at_its_budget_trains_no_step(self):
        plan = position.plan([Segment(0, BATCH)], 100, BATCH, budget_steps=100, workers=1, batch=BATCH)
        self.assertTrue(plan.budget_reached)
        self.assertEqual(100, plan.max_steps)
        past = position.plan([Segment(0, 2 * BATCH)], 100, BATCH, budget_steps=150, workers=1, batch=BATCH)
        self.assertTrue(past.budget_reached)  # 200 batches trained, 150 in the budget

    def test_steps_before_any_record_count_at_this_runs_rate(self):
        plan = position.plan([], 30, 2 * BATCH, budget_steps=100, workers=2, batch=BATCH)
        self.assertEqual((30 * 2 * BATCH, 100, 30), (plan.examples_done, plan.max_steps, plan.skip_batches))

    def test_the_skip_wraps_at_a_pass_over_the_shard(self):
        plan = position.plan([Segment(0, BATCH)], 130, BATCH, budget_steps=300, workers=1, batch=BATCH)
        self.assertEqual(130, plan.skip_in_pass(None))
        self.assertEqual(30, plan.skip_in_pass(50))

    def test_bad_rates_are_named(self):
        with self.assertRaisesRegex(ValueError, "workers must be >= 1, got 0"):
            position.plan([], 0, BATCH, budget_steps=10, workers=0, batch=BATCH)


class RecordTest(tf.test.TestCase):

    def test_a_start_drops_the_steps_that_were_lost_and_adds_its_rate(self):
        model_dir = self.create_tempdir().full_path
        self.assertEqual([], position.read(model_dir))
        self.assertEqual([Segment(0, 128)], position.record(model_dir, [], 0, 128))
        self.assertEqual([Segment(0, 128)], position.read(model_dir))
        # A restart at the same rate changes nothing (the file is not rewritten).
        before = os.stat(position.path(model_dir)).st_mtime_ns
        self.assertEqual([Segment(0, 128)], position.record(model_dir, position.read(model_dir), 40, 128))
        self.assertEqual(before, os.stat(position.path(model_dir)).st_mtime_ns)
        # A resize at step 40, then a restart at step 30 (the checkpoint after 40 was lost): the
        # segment from 40 on is dropped.
        segments = position.record(model_dir, position.read(model_dir), 40, 192)
        self.assertEqual([Segment(0, 128), Segment(40, 192)], segments)
        self.assertEqual([Segment(0, 128), Segment(30, 64)], position.record(model_dir, segments, 30, 64))
        self.assertEqual(30 * 128 + 10 * 64, position.examples_at(position.read(model_dir), 40, 1))

    def test_an_old_model_directory_gets_a_record_at_this_runs_rate(self):
        model_dir = self.create_tempdir().full_path
        self.assertEqual([Segment(0, 128)], position.record(model_dir, [], 50, 128))

    def test_a_file_of_something_else_is_named(self):
        model_dir = self.create_tempdir().full_path
        with open(position.path(model_dir), "w") as f:
            json.dump({"segments": 3}, f)
        with self.assertRaisesRegex(ValueError, "input_position.json is not an input position record"):
            position.read(model_dir)


if __name__ == "__main__":
    tf.test.main()
