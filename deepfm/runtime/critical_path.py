"""How many cores one traced step could keep busy: its work against its longest chain of dependent ops.

A step's ops form a graph (the partition graphs the session ran, after
Grappler's rewrites); each op of a traced step has a duration. Two figures
bound what more threads can give one process:

* `work_ms`: the sum of its ops' durations (what one thread would run);
* `critical_path_ms`: the longest chain of ops each of which needs the one
  before it (data or control edge), weighed by their durations: however many
  threads, the step takes at least this long unless the ops on it get
  faster themselves (intra-op threads splitting a large op).

`parallelism` = work / critical path: the most threads the step's op graph
can keep busy at the ops' traced speed. From a trace on one core,
`speedup_bound(n)` = work / max(critical path, work / n) is the most n cores
can give without faster ops; a trace on n cores whose `work_ms` is larger
than one core's says how much slower its ops ran beside each other.
"""

import dataclasses
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

MICROS_PER_MS = 1000.0
# The longest ops of the critical path that a summary names.
TOP_OPS = 5
CONTROL_INPUT = "^"


@dataclasses.dataclass(frozen=True)
class PathOp:
    """An op on the critical path: its node name, type and traced duration."""

    name: str
    op: str
    ms: float


@dataclasses.dataclass(frozen=True)
class CriticalPath:
    """A traced step's work and longest dependent chain (see the module docstring).

    Attributes:
      work_ms: the sum of the durations of the step's ops.
      critical_path_ms: the duration of its longest chain of dependent ops.
      ops: the ops of that chain, in order.
    """

    work_ms: float
    critical_path_ms: float
    ops: Tuple[PathOp, ...]

    @property
    def parallelism(self) -> float:
        """work / critical path: the most threads the op graph keeps busy (1 when nothing ran)."""
        return self.work_ms / self.critical_path_ms if self.critical_path_ms > 0 else 1.0

    def speedup_bound(self, threads: int) -> float:
        """The most `threads` threads can speed this step up, its ops as fast as traced."""
        if threads < 1:
            raise ValueError("threads must be >= 1, got %r" % threads)
        floor = max(self.critical_path_ms, self.work_ms / threads)
        return self.work_ms / floor if floor > 0 else 1.0

    def summary(self) -> Dict:
        """A JSON-ready dict: the figures and the longest ops of the chain."""
        longest = sorted(self.ops, key=lambda op: -op.ms)[:TOP_OPS]
        return {"work_ms": self.work_ms, "critical_path_ms": self.critical_path_ms,
                "parallelism": self.parallelism,
                "critical_ops": [dataclasses.asdict(op) for op in longest]}


def _node_name(tensor: str) -> str:
    return tensor[len(CONTROL_INPUT):] if tensor.startswith(CONTROL_INPUT) else tensor.split(":", 1)[0]


def longest_chain(inputs: Dict[str, Sequence[str]], durations_ms: Dict[str, float],
                  op_types: Optional[Dict[str, str]] = None) -> CriticalPath:
    """The work and longest weighted chain of an op graph.

    Args:
      inputs: each node's inputs as a `NodeDef` lists them (`name`,
        `name:1`, `^name` for a control input); inputs that are not nodes
        of the graph (another process's) start a chain.
      durations_ms: each node's traced duration; nodes without one weigh 0.
      op_types: each node's op type, for `CriticalPath.ops`.

    Raises:
      ValueError: the graph has a cycle.
    """
    op_types = op_types or {}
    edges = {node: [_node_name(i) for i in node_inputs] for node, node_inputs in inputs.items()}
    nodes = set(edges) | set(durations_ms)
    finish: Dict[str, float] = {}
    before: Dict[str, Optional[str]] = {}
    state: Dict[str, int] = {}  # 1: on the stack, 2: done
    for root in nodes:
        if root in state:
            continue
        stack: List[Tuple[str, int]] = [(root, 0)]
        state[root] = 1
        while stack:
            node, index = stack.pop()
            node_inputs = [i for i in edges.get(node, ()) if i in nodes]
            if index < len(node_inputs):
                stack.append((node, index + 1))
                child = node_inputs[index]
                if state.get(child) == 1:
                    raise ValueError("the step's graph has a cycle through %r" % child)
                if child not in state:
                    state[child] = 1
                    stack.append((child, 0))
                continue
            best, prev = 0.0, None
            for i in node_inputs:
                if finish[i] > best:
                    best, prev = finish[i], i
            finish[node] = best + durations_ms.get(node, 0.0)
            before[node] = prev
            state[node] = 2
    if not finish:
        return CriticalPath(0.0, 0.0, ())
    last: Optional[str] = max(finish, key=lambda node: finish[node])
    chain = []
    while last is not None:
        chain.append(PathOp(last, op_types.get(last, ""), durations_ms.get(last, 0.0)))
        last = before[last]
    return CriticalPath(sum(durations_ms.values()), finish[chain[0].name], tuple(reversed(chain)))


def of_step(run_metadata, local: Optional[Iterable[str]] = None) -> CriticalPath:
    """The critical path of a traced step: a `RunMetadata` with step stats and partition graphs.

    Args:
      run_metadata: from a `Session.run` with `RunOptions(trace_level=FULL_TRACE,
        output_partition_graphs=True)`.
      local: the devices of this process; None: every device of the step.

    Raises:
      ValueError: the metadata holds no partition graphs (the run did not ask
        for them).
    """
    if not run_metadata.partition_graphs:
        raise ValueError("the traced step has no partition graphs: run it with "
                         "RunOptions(output_partition_graphs=True)")
    local_devices = None if local is None else set(local)
    durations: Dict[str, float] = {}
    for device in run_metadata.step_stats.dev_stats:
        if local_devices is not None and device.device not in local_devices:
            continue
        for node in device.node_stats:
            name = node.node_name.split(":", 1)[0]
            durations[name] = durations.get(name, 0.0) + max(node.all_end_rel_micros, 0) / MICROS_PER_MS
    inputs: Dict[str, Sequence[str]] = {}
    op_types: Dict[str, str] = {}
    for graph in run_metadata.partition_graphs:
        for node in graph.node:
            if local_devices is None or node.name in durations or node.device in local_devices:
                inputs[node.name] = list(node.input)
                op_types[node.name] = node.op
    return longest_chain(inputs, durations, op_types)
