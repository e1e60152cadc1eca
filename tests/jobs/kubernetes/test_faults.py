"""Tests of jobs.kubernetes.local.faults: a fault schedule applies its faults in order, one at a time."""

import tensorflow as tf

from jobs.kubernetes.local.faults import Fault, FaultSchedule

WORKER, CHIEF = "job-worker-0", "job-chief-0"
# The rehearsal of docs/kubernetes.md, with checkpoints every 20 steps.
REHEARSAL = (Fault("lose", WORKER, 40), Fault("return", WORKER, 60), Fault("kill", CHIEF, 80))


class FaultScheduleTest(tf.test.TestCase):

    def setUp(self):
        super().setUp()
        self.events, self.killed = [], []

    def apply(self, schedule, step, running=(CHIEF, WORKER)):
        schedule.apply(step, running, self.killed.append, self.events.append)

    def test_a_return_waits_for_the_exit_of_the_pod_whose_node_was_lost(self):
        schedule = FaultSchedule(REHEARSAL)
        # The checkpoint is already at 60 when the loss lands: the return is due too, and must wait.
        self.apply(schedule, 60)
        self.assertEqual([WORKER], self.killed)
        self.assertEqual({WORKER}, schedule.nodes_down)
        self.apply(schedule, 80)
        self.assertEqual({WORKER}, schedule.nodes_down, "the node came back before its pod's exit was seen")
        self.assertLen(self.events, 1)
        # The run handled the worker's exit (the job shrank); the job goes on with the chief alone.
        schedule.settled(WORKER)
        self.apply(schedule, 80, running=(CHIEF,))
        self.assertEqual(set(), schedule.nodes_down)
        self.assertEqual([WORKER, CHIEF], self.killed)
        self.assertEqual(["fault: losing the node of pod %s (checkpoint at step 60)" % WORKER,
                          "fault: the node of pod %s is back (checkpoint at step 80)" % WORKER,
                          "fault: killing pod %s (checkpoint at step 80)" % CHIEF], self.events)
        self.assertEqual([], schedule.pending)

    def test_faults_land_in_the_order_given(self):
        schedule = FaultSchedule((Fault("kill", CHIEF, 50), Fault("kill", WORKER, 20)))
        self.apply(schedule, 30)
        self.assertEqual([], self.killed, "the second fault went before the first")
        self.apply(schedule, 50)
        self.assertEqual([CHIEF], self.killed)
        schedule.settled(WORKER)  # another pod's exit settles nothing
        self.apply(schedule, 60)
        self.assertEqual([CHIEF], self.killed)
        schedule.settled(CHIEF)
        self.apply(schedule, 60)
        self.assertEqual([CHIEF, WORKER], self.killed)

    def test_a_fault_of_a_pod_not_running_waits_and_holds_the_ones_after_it(self):
        schedule = FaultSchedule((Fault("kill", WORKER, 10), Fault("kill", CHIEF, 10)))
        self.apply(schedule, 10, running=(CHIEF,))
        self.assertEqual([], self.killed)
        self.apply(schedule, 20)
        self.assertEqual([WORKER], self.killed)


if __name__ == "__main__":
    tf.test.main()
