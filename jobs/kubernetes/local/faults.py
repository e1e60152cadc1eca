"""Failures injected into a local run once its checkpoints reach a step: a killed pod, a lost or returned node.

What a test or a rehearsal does to a running job (`deepfm.kubernetes local
--fault ACTION:POD@STEP`): `Fault` is one failure, `FaultSchedule` the ones
still to come and the pods whose nodes are gone. This module never imports
TensorFlow.
"""

import dataclasses
import re
from typing import Callable, Collection, Optional, Sequence, Set


@dataclasses.dataclass(frozen=True)
class Fault:
    """A failure to inject once the job's latest checkpoint reaches `after_step` (what a test or a rehearsal does).

    Attributes:
      action: `kill` (the pod's processes get SIGKILL, its node stays),
        `lose` (also its node goes away until a `return`) or `return` (the
        node of the pod of that name comes back).
      pod: the pod's name.
      after_step: the global step of a saved checkpoint that triggers it.
    """

    KILL = "kill"
    LOSE = "lose"
    RETURN = "return"
    ACTIONS = (KILL, LOSE, RETURN)

    action: str
    pod: str
    after_step: int = 1

    def __post_init__(self):
        if self.action not in self.ACTIONS:
            raise ValueError("--fault %s: the action must be one of %s" % (self.action, ", ".join(self.ACTIONS)))

    @classmethod
    def parse(cls, text: str) -> "Fault":
        """`ACTION:POD@STEP` (e.g. `lose:ps-job-worker-0@20`).

        Raises:
          ValueError: another form; the message shows the expected one.
        """
        match = re.match(r"^(\w+):([-a-z0-9.]+)@(\d+)$", text)
        if not match:
            raise ValueError("--fault %r must be ACTION:POD@STEP, e.g. kill:job-worker-0@20" % text)
        return cls(action=match.group(1), pod=match.group(2), after_step=int(match.group(3)))


class FaultSchedule:
    """The faults of a run not applied yet, and the pods whose nodes are gone (until a `return` brings one back).

    A schedule tells the same story every time it is replayed: the faults
    are applied one at a time, in the order given, and a `kill` or `lose`
    holds the next fault back until the run has handled the exit of the pod
    it killed (`settled`: the pod recreated, or every pod restarted with
    the nodes left). Otherwise a `return` due a checkpoint later could land
    between a `lose` and the exit it causes, and the lost worker would be
    recreated in place instead of the job shrinking: one rehearsal of the
    docs' `lose@40, return@60, kill@80` ended "2 restart(s) (0 elastic
    resize(s))", another "(2 elastic resize(s))".

    Args:
      faults: the failures to inject, in the order they are applied.
    """

    def __init__(self, faults: Sequence[Fault]):
        self.pending = list(faults)
        self.nodes_down: Set[str] = set()
        # The pod the last kill or loss hit, until the run has handled its exit.
        self.awaiting: Optional[str] = None

    def apply(self, step: Optional[int], running: Collection[str], kill: Callable[[str], None],
              log: Callable[[str], None]) -> None:
        """Applies the next faults, in order, whose step `step` (the latest checkpoint's; None: none yet) reached.

        Args:
          step: the global step of the job's latest checkpoint.
          running: the pods running now (the next fault, of another pod, waits).
          kill: kills every process of a pod (its node stays).
          log: records an event of the run.
        """
        while self.pending and self.awaiting is None:
            fault = self.pending[0]
            if step is None or step < fault.after_step:
                return
            if fault.action == Fault.RETURN:
                self.pending.pop(0)
                self.nodes_down.discard(fault.pod)
                log("fault: the node of pod %s is back (checkpoint at step %d)" % (fault.pod, step))
                continue
            if fault.pod not in running:
                return
            self.pending.pop(0)
            log("fault: %s pod %s (checkpoint at step %d)" % (
                "killing" if fault.action == Fault.KILL else "losing the node of", fault.pod, step))
            if fault.action == Fault.LOSE:
                self.nodes_down.add(fault.pod)
            self.awaiting = fault.pod
            kill(fault.pod)

    def settled(self, pod: str) -> None:
        """The run has handled the exit of `pod` (recreated it, or decided to restart every pod)."""
        if self.awaiting == pod:
            self.awaiting = None
