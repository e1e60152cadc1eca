"""A cost model of data-parallel DeepFM training: examples/sec for N hosts x C cores at a link speed.

Pure arithmetic on one measured step (`StepProfile`: what one training step
of one process on one core costs, and what it would exchange) and a cluster
shape (`Cluster`: hosts, cores per host, training processes per host). A
host of C cores runs R training processes (`ranks_per_host`, default one
per core), each on T = C / R cores with T threads; `hosts x R` replicas of
`batch_size` examples. A step of one process costs, with nothing overlapped:

    compute(T) = compute x (serial + (1 - serial) / T)
    step = compute(T) x (1 + compute_factor)
           + (overhead + cpu_per_byte x bytes the process handles) x (1 - spread + spread / T)
           + bytes on its host's link / link bandwidth + latency x rounds

`overhead` (a distributed step's fixed cost: the collective's or RPC's
bookkeeping, the extra ops), `cpu_per_byte` and `compute_factor` (the cost
that grows with the step itself: the distributed lookup's ops on every id
of the batch, Horovod's background thread cycling through the step, ranks
waiting on each other's slower steps) are machine constants (`StepCosts`),
one set for Horovod's collectives, one for the parameter servers' gRPC and
one for the hybrid strategy's all-to-alls, and for Horovod's strategies
another set over MPI with yielding waits where measured
(`Cluster.transport`; else their set over Gloo), fitted by `cost_fit.calibrate` to
measured steps (`benchmarks.scale_out`): what a measured step took beyond
its compute and its bytes' time on the link, waiting included. Two more
(`CoreCosts`) say what a process's further cores give: `serial`, the share
of a step's compute that one thread runs whatever the threads (Amdahl's
law: `cost_fit.fit_serial_fraction` on one process's steps at 1 and T threads), and
`spread`, the share of the exchange's own cost that spreads over the
process's cores (Gloo's and Horovod's threads beside the step's:
`cost_fit.fit_exchange_spread` on distributed steps at 1 and T cores per rank).

* `horovod` (sparse): embedding gradients are `IndexedSlices`, allgathered
  (ring: each host link carries every other process's rows once), dense
  gradients ring-allreduced; every process handles (sends and receives) all
  the other processes' rows.
* `horovod_dense` (`--sparse_as_dense`): the whole embedding tables are
  ring-allreduced with the dense gradients.
* `ps` (asynchronous, a parameter server on every host as SageMaker lays it
  out): every step pulls the rows and dense weights it needs and pushes their
  gradients; (hosts - 1) / hosts of that goes to another host, and both the
  worker and the ps side of each transfer run on the host's cores.
* `hybrid`: the tables are sharded over the processes; each process sends
  its batch's distinct ids to their owners and receives their rows
  (forward), then sends the rows' gradients back (backward), all-to-all:
  (processes - 1) / processes of its distinct rows cross to another
  process, whatever the number of processes; the owners' side of every
  exchange is the same size; dense gradients are ring-allreduced. The bytes
  a process handles per step do not grow with the number of processes.
  With `--exchange_fp16` the rows and their gradients move as float16.
* `single`: one process on the cores of one rank: `batch_size / compute(T)`.

Rows per step are the distinct ids of a batch with `--dedup_lookups`,
every id (batch x fields) without; `hybrid` always moves distinct ids.
Efficiency = compute(T) / step (a process of a multi-process job against
one process alone on the same cores). `planner.layouts` tries
every number of processes per host that divides a host's cores.
"""

import dataclasses
from typing import Dict, List, Mapping, NamedTuple, Tuple

from strategies import strategy_names as names

FLOAT_BYTES = 4
HALF_BYTES = 2
INDEX_BYTES = 8
BITS_PER_BYTE = 8
GIGA = 1e9
# Two embedding tables: the FM weights (1 float per row) and factors (k floats per row).
EMBEDDING_TABLES = 2
# A ps step is two request/response exchanges (pull, push), each a round trip.
PS_ROUND_TRIPS = 2
DEFAULT_LATENCY_S = 50e-6
# The link of hosts without a bandwidth limit (a veth pair; memory speed).
DEFAULT_UNLIMITED_GBPS = 100.0

SINGLE, PS, HOROVOD, HYBRID = names.SINGLE, names.PS, names.HOROVOD, names.HYBRID
# Horovod with --sparse_as_dense: embedding gradients allreduced as dense tensors.
HOROVOD_DENSE = "horovod_dense"
STRATEGIES = (SINGLE, PS, HOROVOD, HOROVOD_DENSE, HYBRID)
# The strategies whose processes are Horovod ranks (their collectives' costs).
RANK_STRATEGIES = (HOROVOD, HOROVOD_DENSE, HYBRID)
# How Horovod's ranks talk (`Cluster.transport`): Gloo (`horovodrun --gloo`, `deepfm.launch` where `mpirun` is
# missing) or MPI with yielding waits (SageMaker's `mpi` distribution, a Kubernetes MPIJob, `deepfm.launch` with
# `mpirun`: `jobs.spec.MPI_YIELD_OPTIONS`). A strategy's costs over MPI are `StepProfile.step_costs[
# costs_key(strategy, MPI)]` where fitted, else its costs over Gloo.
GLOO, MPI = "gloo", "mpi"
TRANSPORTS = (GLOO, MPI)
TRANSPORT_SEPARATOR = "@"
# A hybrid step: two all-to-alls forward (ids out, rows back), two backward (the reverse).
HYBRID_ALLTOALLS = 4
ID_BYTES = 4

# CPU instance types of SageMaker training: (physical cores, i.e. vCPUs / 2; network Gbit/s, the
# sustained figure where AWS says "up to").
INSTANCE_THREADS_PER_CORE = 2
INSTANCE_SHAPES = {
    "ml.c5.xlarge": (2, 10.0), "ml.c5.2xlarge": (4, 10.0), "ml.c5.4xlarge": (8, 10.0),
    "ml.c5.9xlarge": (18, 10.0), "ml.c5.18xlarge": (36, 25.0), "ml.c5n.18xlarge": (36, 100.0),
    "ml.m5.xlarge": (2, 10.0), "ml.m5.4xlarge": (8, 10.0), "ml.m5.12xlarge": (24, 10.0),
    "ml.m5.24xlarge": (48, 25.0),
}


def costs_key(strategy: str, transport: str = GLOO) -> str:
    """The key of `strategy`'s costs over `transport` in `StepProfile.step_costs`: `hybrid`, `hybrid@mpi`."""
    return strategy if transport == GLOO else strategy + TRANSPORT_SEPARATOR + transport


def _costs_keys() -> Tuple[str, ...]:
    return tuple(s for s in STRATEGIES if s != SINGLE) + tuple(
        costs_key(s, t) for s in RANK_STRATEGIES for t in TRANSPORTS if t != GLOO)


def instance_vcpus(instance_type: str) -> int:
    """The vCPUs of a SageMaker CPU instance type: two hyperthreads per core of `INSTANCE_SHAPES`.

    Raises:
      ValueError: as `instance_shape`.
    """
    return INSTANCE_THREADS_PER_CORE * instance_shape(instance_type)[0]


def instance_shape(instance_type: str) -> Tuple[int, float]:
    """`(cores, link Gbit/s)` of a SageMaker CPU instance type.

    Raises:
      ValueError: a type the table does not hold (GPU types among them: their
        step is not measured on this machine's CPU); the message lists the known ones.
    """
    if instance_type not in INSTANCE_SHAPES:
        raise ValueError("no CPU shape known for instance type %r; known: %s"
                         % (instance_type, ", ".join(sorted(INSTANCE_SHAPES))))
    return INSTANCE_SHAPES[instance_type]


class CoreCosts(NamedTuple):
    """What a process's further cores give (machine constants; see the module docstring).

    Attributes:
      serial_fraction: the share of a step's compute one thread runs
        whatever the threads (1: further threads give nothing).
      exchange_spread: the share of a distributed step's fixed and
        per-byte cost that spreads over the process's cores (0: none).
    """

    serial_fraction: float = 1.0
    exchange_spread: float = 0.0

    def check(self) -> None:
        """Raises ValueError, naming the member, for a share outside [0, 1]."""
        for member, value in self._asdict().items():
            if not 0.0 <= value <= 1.0:
                raise ValueError("core_costs: %s must be in [0, 1], got %r" % (member, value))

    def compute_share(self, threads: int) -> float:
        """compute(T) / compute(1): Amdahl's law with `serial_fraction`."""
        return self.serial_fraction + (1.0 - self.serial_fraction) / threads

    def exchange_share(self, threads: int) -> float:
        """The exchange's fixed and per-byte cost at T cores per process over its cost at one."""
        return 1.0 - self.exchange_spread + self.exchange_spread / threads


class StepCosts(NamedTuple):
    """What a distributed step of one strategy costs beyond its compute and the link (machine constants).

    Attributes:
      overhead_s: fixed seconds per step.
      cpu_s_per_byte: CPU seconds per byte a process sends or receives
        (serialization, copies, applying received rows).
      compute_factor: seconds per second of the step's compute (work and
        waiting that grow with the step).
    """

    overhead_s: float = 0.0
    cpu_s_per_byte: float = 0.0
    compute_factor: float = 0.0

    def check(self, name: str) -> None:
        """Raises ValueError, naming `name` and the member, for a negative cost."""
        for member, value in self._asdict().items():
            if value < 0:
                raise ValueError("%s: %s must be >= 0, got %r" % (name, member, value))


@dataclasses.dataclass(frozen=True)
class StepProfile:
    """One measured training step of one process on one core.

    Attributes:
      compute_s: wall seconds of one step, alone on one core.
      batch_size: examples per step.
      ids_per_step: ids per batch (batch x fields).
      distinct_ids_per_step: distinct ids per batch (mean).
      embedding_size: k, floats per row of the factor table.
      feature_size: rows of each embedding table.
      dense_params: parameters outside the embedding tables.
      step_costs: `StepCosts` by strategy: `HOROVOD`'s are those of every
        strategy without its own (`PS`, `HYBRID` and `HOROVOD_DENSE` may
        have their own), and a Horovod strategy's over MPI under
        `costs_key(strategy, MPI)` (else its own over Gloo); none: a
        distributed step costs only its bytes' time on the link and its
        latency.
      dedup: whether lookups are deduplicated (`distinct_ids_per_step` rows move).
      exchange_fp16: `hybrid` moves its rows and their gradients as float16.
      core_costs: what a process's further cores give (`CoreCosts`;
        default: nothing, as if every process had one core).
    """

    compute_s: float
    batch_size: int
    ids_per_step: int
    distinct_ids_per_step: float
    embedding_size: int
    feature_size: int
    dense_params: int
    step_costs: Mapping[str, StepCosts] = dataclasses.field(default_factory=dict)
    dedup: bool = True
    exchange_fp16: bool = False
    core_costs: CoreCosts = CoreCosts()

    def __post_init__(self):
        if self.compute_s <= 0:
            raise ValueError("compute_s must be > 0, got %r" % self.compute_s)
        if self.batch_size < 1:
            raise ValueError("batch_size must be >= 1, got %r" % self.batch_size)
        if not 0 < self.distinct_ids_per_step <= self.ids_per_step:
            raise ValueError("distinct_ids_per_step must be in (0, ids_per_step=%d], got %r"
                             % (self.ids_per_step, self.distinct_ids_per_step))
        for strategy, costs in self.step_costs.items():
            if strategy not in _costs_keys():
                raise ValueError("step_costs: no costs for strategy %r; strategies with costs: %s"
                                 % (strategy, ", ".join(_costs_keys())))
            StepCosts(*costs).check("step_costs[%r]" % strategy)
        CoreCosts(*self.core_costs).check()

    def compute_at(self, threads: int) -> float:
        """Seconds of one step's compute on `threads` cores (`CoreCosts.compute_share`)."""
        return self.compute_s * CoreCosts(*self.core_costs).compute_share(threads)

    def costs(self, strategy: str, transport: str = GLOO) -> StepCosts:
        """The `StepCosts` of a distributed step of `strategy` over `transport`.

        Its own over `transport`, else its own over Gloo, else Horovod's,
        else none. `transport` matters to Horovod's strategies only.
        """
        own = self.step_costs.get(costs_key(strategy, transport)) if strategy in RANK_STRATEGIES else None
        return StepCosts(*(own or self.step_costs.get(strategy, self.step_costs.get(HOROVOD, StepCosts()))))

    @property
    def rows(self) -> float:
        """Embedding rows one step moves per table."""
        return self.distinct_ids_per_step if self.dedup else float(self.ids_per_step)

    @property
    def row_bytes(self) -> int:
        """Bytes of one row of both tables together."""
        return (self.embedding_size + 1) * FLOAT_BYTES

    @property
    def sparse_bytes(self) -> float:
        """Bytes of one step's embedding rows (or their gradients) with their indices."""
        return self.rows * (self.row_bytes + EMBEDDING_TABLES * INDEX_BYTES)

    @property
    def hybrid_bytes(self) -> float:
        """Bytes one process sends per step in the hybrid exchange if every owner were remote.

        Its distinct ids out and their rows back (forward), the rows'
        gradients out (backward); the owner side of the exchange adds the
        same again, which `traffic` counts.
        """
        row_bytes = self.row_bytes * HALF_BYTES // FLOAT_BYTES if self.exchange_fp16 else self.row_bytes
        return self.distinct_ids_per_step * (ID_BYTES + 2 * row_bytes)

    @property
    def dense_bytes(self) -> int:
        """Bytes of the parameters (or gradients) outside the embedding tables."""
        return self.dense_params * FLOAT_BYTES

    @property
    def table_bytes(self) -> int:
        """Bytes of both embedding tables, whole."""
        return self.feature_size * self.row_bytes


@dataclasses.dataclass(frozen=True)
class Cluster:
    """A cluster shape.

    Attributes:
      hosts: hosts.
      cores_per_host: cores of each host.
      link_gbps: each host's link, Gbit/s each way.
      latency_s: one-way latency of a message between hosts.
      ranks_per_host: training processes per host, each on cores_per_host /
        ranks_per_host cores with as many threads (0: one per core).
      transport: how Horovod's ranks talk, `GLOO` or `MPI` (with yielding
        waits, as SageMaker's and Kubernetes' MPI jobs start them).
    """

    hosts: int
    cores_per_host: int
    link_gbps: float
    latency_s: float = DEFAULT_LATENCY_S
    ranks_per_host: int = 0
    transport: str = GLOO

    def __post_init__(self):
        if self.hosts < 1 or self.cores_per_host < 1:
            raise ValueError("hosts and cores_per_host must be >= 1, got %r x %r"
                             % (self.hosts, self.cores_per_host))
        if self.link_gbps <= 0:
            raise ValueError("link_gbps must be > 0, got %r" % self.link_gbps)
        if self.latency_s < 0:
            raise ValueError("latency_s must be >= 0, got %r" % self.latency_s)
        if self.ranks_per_host < 0 or self.cores_per_host % self.ranks:
            raise ValueError("ranks_per_host must divide cores_per_host %d (each rank gets cores_per_host / "
                             "ranks_per_host cores), got %r" % (self.cores_per_host, self.ranks_per_host))
        if self.transport not in TRANSPORTS:
            raise ValueError("transport must be one of %s, got %r" % (", ".join(TRANSPORTS), self.transport))

    @property
    def ranks(self) -> int:
        """Training processes per host."""
        return self.ranks_per_host or self.cores_per_host

    @property
    def threads(self) -> int:
        """Cores (and threads) of each training process."""
        return self.cores_per_host // self.ranks

    @property
    def processes(self) -> int:
        return self.hosts * self.ranks

    @property
    def link_bytes_per_s(self) -> float:
        return self.link_gbps * GIGA / BITS_PER_BYTE

    def with_ranks(self, ranks_per_host: int) -> "Cluster":
        """This cluster with `ranks_per_host` training processes per host."""
        return dataclasses.replace(self, ranks_per_host=ranks_per_host)


def divisors(count: int) -> List[int]:
    """The numbers of processes per host a host of `count` cores can run with equal cores each."""
    return [ranks for ranks in range(1, count + 1) if count % ranks == 0]


@dataclasses.dataclass(frozen=True)
class Prediction:
    """The predicted step of one strategy on one cluster.

    Attributes:
      strategy: one of `STRATEGIES`.
      processes: training processes.
      ranks_per_host: training processes per host.
      threads: cores (and threads) of each.
      compute_s: compute per step.
      cpu_comm_s: the step's cost beyond compute, the link and latency
        (`StepCosts`: CPU, and waiting that grows with the step).
      link_s: time per step on the host link.
      latency_s: latency per step.
      link_bytes: bytes per step on each host's link (each way).
      handled_bytes: bytes per step each process's cores send and receive.
      examples_per_sec: the job's predicted throughput.
      efficiency: compute / step.
    """

    strategy: str
    processes: int
    ranks_per_host: int
    threads: int
    compute_s: float
    cpu_comm_s: float
    link_s: float
    latency_s: float
    link_bytes: float
    handled_bytes: float
    examples_per_sec: float
    efficiency: float

    @property
    def step_s(self) -> float:
        return self.compute_s + self.cpu_comm_s + self.link_s + self.latency_s

    def bottleneck(self) -> str:
        """The largest term of the step besides compute."""
        terms = {"the exchange's CPU and waiting": self.cpu_comm_s, "link bandwidth": self.link_s,
                 "latency": self.latency_s}
        return max(terms, key=lambda term: terms[term])


def traffic(strategy: str, profile: StepProfile, cluster: Cluster) -> Tuple[float, float, int]:
    """`(link bytes per host, bytes handled per process, latency rounds)` of one step.

    Raises:
      ValueError: an unknown strategy.
    """
    processes, hosts = cluster.processes, cluster.hosts
    if strategy == SINGLE:
        return 0.0, 0.0, 0
    remote = 1.0 if hosts > 1 else 0.0
    if strategy == HOROVOD:
        # Ring allgather: each link carries the rows of every process but one.
        gathered = (processes - 1) * profile.sparse_bytes
        reduced = 2.0 * (processes - 1) / processes * profile.dense_bytes
        return remote * (gathered + reduced), 2.0 * (gathered + reduced), 3 * (processes - 1)
    if strategy == HOROVOD_DENSE:
        reduced = 2.0 * (processes - 1) / processes * (profile.table_bytes + profile.dense_bytes)
        return remote * reduced, 2.0 * reduced, 2 * (processes - 1)
    if strategy == HYBRID:
        reduced = 2.0 * (processes - 1) / processes * profile.dense_bytes
        # Each process's exchange with every other process, and its owner side of theirs.
        exchanged = (processes - 1) / processes * profile.hybrid_bytes
        remote_share = (processes - cluster.ranks) / processes
        link = cluster.ranks * (remote_share * profile.hybrid_bytes + remote * reduced)
        return link, 2.0 * (exchanged + reduced), HYBRID_ALLTOALLS + 2 * (processes - 1)
    if strategy == PS:
        # Pull: ids out, rows and dense weights in; push: the same as gradients (with indices).
        per_worker = 2.0 * (profile.sparse_bytes + profile.dense_bytes)
        link = cluster.ranks * (hosts - 1) / hosts * per_worker
        # Worker and ps ends of every transfer run on the host's cores.
        return link, 2.0 * per_worker, 2 * PS_ROUND_TRIPS
    raise ValueError("strategy must be one of %s, got %r" % (", ".join(STRATEGIES), strategy))


def predict(strategy: str, profile: StepProfile, cluster: Cluster) -> Prediction:
    """Predicted examples/sec of `strategy` on `cluster` (see the module docstring).

    `single` runs one process on the cores of one of the cluster's ranks.
    """
    link_bytes, handled, rounds = traffic(strategy, profile, cluster)
    processes = 1 if strategy == SINGLE else cluster.processes
    latency = rounds * cluster.latency_s if cluster.hosts > 1 else 0.0
    threads = cluster.threads
    compute = profile.compute_at(threads)
    cpu = 0.0
    if strategy != SINGLE:
        costs = profile.costs(strategy, cluster.transport)
        spread = CoreCosts(*profile.core_costs).exchange_share(threads)
        cpu = (costs.overhead_s + costs.cpu_s_per_byte * handled) * spread + costs.compute_factor * compute
    link = link_bytes / cluster.link_bytes_per_s
    step = compute + cpu + link + latency
    return Prediction(strategy=strategy, processes=processes, ranks_per_host=1 if strategy == SINGLE else cluster.ranks,
                      threads=threads, compute_s=compute, cpu_comm_s=cpu, link_s=link, latency_s=latency,
                      link_bytes=link_bytes, handled_bytes=handled,
                      examples_per_sec=processes * profile.batch_size / step,
                      efficiency=compute / step)


def predict_all(profile: StepProfile, cluster: Cluster) -> List[Prediction]:
    """Every strategy's prediction, best first."""
    return sorted((predict(s, profile, cluster) for s in STRATEGIES), key=lambda p: -p.examples_per_sec)


def choose(profile: StepProfile, cluster: Cluster) -> Tuple[str, str]:
    """`(strategy, reason)`: the strategy with the highest predicted examples/sec, and why."""
    ranked = predict_all(profile, cluster)
    best = ranked[0]
    runner_up = ranked[1]
    if best.strategy == SINGLE:
        reason = ("one process on one core beats every multi-process layout: their step (%.1f ms at best, "
                  "%s) costs more than %d processes gain" % (1000 * runner_up.step_s, runner_up.bottleneck(),
                                                             runner_up.processes))
    else:
        reason = ("%s%s: %s examples/sec predicted, efficiency %.2f, %.2f MB per step on each host link; "
                  "%s is next (%s examples/sec, limited by %s)" % (
                      best.strategy, " over MPI" if cluster.transport == MPI and best.strategy in RANK_STRATEGIES
                      else "", format(best.examples_per_sec, ",.0f"), best.efficiency, best.link_bytes / 1e6,
                      runner_up.strategy, format(runner_up.examples_per_sec, ",.0f"), runner_up.bottleneck()))
    return best.strategy, reason


def relative_error(predicted: float, measured: float) -> float:
    """(predicted - measured) / measured."""
    if measured <= 0:
        raise ValueError("measured must be > 0, got %r" % measured)
    return (predicted - measured) / measured


def as_row(prediction: Prediction) -> Dict[str, str]:
    """A prediction as strings for a table."""
    return {
        "strategy": prediction.strategy, "processes": str(prediction.processes),
        "per host x cores": "%dx%d" % (prediction.ranks_per_host, prediction.threads),
        "examples/sec": format(prediction.examples_per_sec, ",.0f"), "efficiency": "%.2f" % prediction.efficiency,
        "step ms": "%.2f" % (1000 * prediction.step_s), "compute ms": "%.2f" % (1000 * prediction.compute_s),
        "exchange CPU and waiting ms": "%.2f" % (1000 * prediction.cpu_comm_s),
        "link ms": "%.2f" % (1000 * prediction.link_s), "latency ms": "%.2f" % (1000 * prediction.latency_s),
        "MB per step per host link": "%.2f" % (prediction.link_bytes / 1e6)}
