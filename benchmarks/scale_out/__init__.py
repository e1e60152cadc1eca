"""Scale-out on emulated hosts: `ps`, `horovod` and `hybrid` at 2 hosts against `single` on the cores of one rank.

    python -m benchmarks.scale_out [--runs 3] [--steps 120] [--warmup_steps 30] [--link_gbps 25]
                                   [--batch_size 1024] [--train_flag=--large_batch_rule=cowclip]
                                   [--cores_per_host 1] [--ranks_per_host 1] [--hosts_mode emulated]
                                   [--variants a,b] [--data_dir data/synthetic_300k]

Hosts are emulated with `jobs.local.hosts` (network namespaces with their own
addresses and names, `algo-1`, `algo-2`, ..., an optional token-bucket
bandwidth limit per host; this kernel has no `netem`, so latency is not
modelled; needs root), or with `--hosts_mode local` as blocks of this
machine's cores without namespaces (`hosts`). A host has
`--cores_per_host` vCPUs (blocks of the machine's vCPUs in topology order,
the hyperthreads of a core together: `benchmarks.topology`) and runs
`--ranks_per_host` training processes, each pinned to its share of the
host's cores with `taskset` and as many TensorFlow threads; `single` runs
on the cores of one rank (`layout`). The defaults, hosts of one core with
one rank, are the 2-core development machine's.

One concept per module:

* `variants`: what is measured (`Variant`, `VARIANTS`, the lever comparisons);
* `config`: one run's set-up (`BenchmarkConfig`);
* `options`: the command lines' options (`ScaleOutOptions`, its flags generated);
* `layout`: the pinning arithmetic (each host's and each process's cores, threads);
* `hosts`: emulated or local hosts;
* `supervisor`: what runs in a host (its processes, their CPU and the host's bytes);
* `runner`: one run of a variant, and interleaved rounds of runs;
* `measure`: a run's measures from the files it wrote (`RunResult`);
* `id_capacity`: the fixed id capacity of `hybrid+capacity`;
* `report`: medians, efficiency, the report and its JSON;
* `cli`: the options' checks, `run` and `main`.

Same data and per-replica batch (`--batch_size`) in every variant; a
single process runs 2 x (warm-up + steps) steps, each of the processes of a
2-process variant warm-up + steps, so every variant trains the same number
of examples before its AUC is measured on the validation split.
`--train_flag` adds a flag to every variant's training (e.g. a large-batch
rule). `hybrid+capacity` pads each rank's id exchange to a fixed capacity
(`--id_capacity`), sized before the runs from the distinct ids the training
data's batches send to each owner (`id_capacity`).

`benchmarks.rank_growth` runs the same machinery with more ranks (on shared
cores by default), and `benchmarks.multicore` the table of hosts of several
cores and of the layouts of one host.

`--trace_steps N` adds, after the timed rounds, one traced run of every
variant: its training processes trace N steps (`deepfm.runtime.step_trace`)
and the report shows where the first process's step goes (compute, waiting
on the exchange alone, the tail after the backward pass, op time by scope).
Traced steps are slower than untimed ones; the traced run is not in the
timings. The results JSON records the machine's topology (`lscpu -e` and
`lscpu`). Results go to `benchmarks/results/scale_out.{md,json,png}`.
"""

from benchmarks.scale_out.cli import check_train_flags, exit_on_sigterm, main, make_config, parse_args, run
from benchmarks.scale_out.config import (
    BATCH,
    DEFAULT_DATA_DIR,
    DEFAULT_LINK_GBPS,
    DEFAULT_ROWS,
    HOSTS_AUTO,
    HOSTS_EMULATED,
    HOSTS_LOCAL,
    LARGE_BATCH,
    LOG_EVERY_STEPS,
    RUN_TIMEOUT_S,
    BenchmarkConfig,
)
from benchmarks.scale_out.id_capacity import ID_CAPACITY_MULTIPLE, distinct_ids_per_owner, id_capacity
from benchmarks.scale_out.measure import HOST_OUTPUT, MB, PROGRESS_DIR, RunResult, measure_run, step_split
from benchmarks.scale_out.options import RunOptions, ScaleOutOptions
from benchmarks.scale_out.report import (
    load_results,
    load_setup,
    raw_results,
    report_body,
    report_machine,
    round_efficiencies,
    summary_rows,
    target_efficiency,
)
from benchmarks.scale_out.runner import host_processes, measure, run_variant
from benchmarks.scale_out.variants import (
    BASELINE,
    HOROVODRUN_ARGS,
    INDEPENDENT,
    LAUNCH_DIRECT,
    LAUNCH_GLOO,
    LAUNCH_MPI,
    LAUNCH_MPI_TCP,
    LAUNCH_MPI_YIELD,
    LAUNCH_SSH_MPI,
    LAUNCH_SSH_MPI_YIELD,
    LEVER_COMPARISONS,
    REFERENCE_HOSTS,
    Variant,
    all_variants,
    host_names,
)

HOST_NAMES = host_names(REFERENCE_HOSTS)
