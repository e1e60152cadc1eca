"""The options of the scale-out command lines, from which their flags are generated.

`RunOptions` are what `benchmarks.scale_out` and `benchmarks.rank_growth`
share (the data, the steps, the hosts' shape, the training flags);
`ScaleOutOptions` adds the link and the traced run. The checks that need
the variants are `cli.make_config`'s.
"""

import dataclasses
from typing import Tuple

from benchmarks import harness
from benchmarks.scale_out.config import (
    BATCH,
    DEFAULT_DATA_DIR,
    DEFAULT_LINK_GBPS,
    DEFAULT_ROWS,
    DEFAULT_RUNS,
    DEFAULT_STEPS,
    DEFAULT_WARMUP_STEPS,
    HOSTS_EMULATED,
    HOSTS_MODES,
    NAME,
    RUN_TIMEOUT_S,
)
from cli import config_flags


@dataclasses.dataclass(frozen=True)
class RunOptions(harness.HarnessConfig):
    """The options of a run of variants on emulated hosts."""

    rounds: int = config_flags.field(DEFAULT_RUNS, "Runs of every variant, interleaved.", flag="runs")
    data_dir: str = config_flags.field(DEFAULT_DATA_DIR, "The synthetic dataset root (generated with --rows rows "
                                                         "where missing).")
    rows: int = config_flags.field(DEFAULT_ROWS, "Rows of a generated dataset.")
    steps: int = config_flags.field(DEFAULT_STEPS, "Timed steps per distributed process.")
    warmup_steps: int = config_flags.field(DEFAULT_WARMUP_STEPS, "Steps of every process before the window.")
    batch_size: int = config_flags.field(BATCH, "Per-replica batch of every variant.")
    timeout_s: float = config_flags.field(float(RUN_TIMEOUT_S), "The longest one run may take.")
    shared_note: str = config_flags.field("", "What else ran on the machine, for the report.")
    cores_per_host: int = config_flags.field(1, "vCPUs of each emulated host (blocks of the machine's vCPUs, "
                                                "hyperthreads of a core together).")
    ranks_per_host: int = config_flags.field(1, "Training processes per host, each pinned to cores_per_host / "
                                                "ranks_per_host of its cores with as many TensorFlow threads; "
                                                "single runs on the cores of one rank.")
    hosts_mode: str = config_flags.field(HOSTS_EMULATED, "emulated: network namespaces (root); local: blocks of "
                                                         "this machine's cores, ranks over the loopback interface; "
                                                         "auto: emulated where they can be made, else local.",
                                         choices=HOSTS_MODES)
    host_memory: str = config_flags.field("", "Memory of each host (a memory cgroup; root needed), e.g. 6g, 6GiB, "
                                              "6500m or bytes; \"\" for no limit. A host killed for memory is "
                                              "reported with its peak and limit.")
    train_flag: Tuple[str, ...] = config_flags.field(
        (), "A flag added to every variant's deepfm.train, e.g. --train_flag=--large_batch_rule=cowclip (repeat "
            "for more).", repeated=True)
    report_only: str = config_flags.field("", "Write the report again from this results JSON (no runs; the "
                                              "variants, runs, steps, batch, layout and training flags as it was "
                                              "run).")


@dataclasses.dataclass(frozen=True)
class ScaleOutOptions(RunOptions):
    """`python -m benchmarks.scale_out`'s options."""

    name: str = config_flags.field(NAME, "The report's file name, without extension.")
    link_gbps: float = config_flags.field(DEFAULT_LINK_GBPS, "Egress limit per host in Gbit/s; 0: none.")
    trace_steps: int = config_flags.field(0, "Steps to trace in one extra run of every variant (0: no traced run).")
