"""The report of a soak (`benchmarks/results/<name>.md` and `.json`): one run's, nothing combined."""

import collections
import dataclasses
import json
import subprocess
from typing import List

from benchmarks import common
from benchmarks.soak_config import WORK_DIR_MARK, SoakCommand, SoakConfig, epochs_of
from benchmarks.soak_faults import KINDS


def lscpu() -> str:
    try:
        return subprocess.run(["lscpu"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "lscpu unavailable"


def report(config: SoakConfig, command: str, results: List[dict], seconds: float) -> str:
    """The markdown body of the report."""
    lines = ["Command: `%s` (%.0f min in all). Schedule seed %d, %d fault(s) per strategy; data: %d synthetic "
             "rows, feature_size %d, %d epoch(s) at batch %d per worker, a checkpoint every %d steps; `ps`: 2 "
             "parameter servers and %d training task(s), %d epoch(s), `horovod` 2 ranks, `hybrid` 2 ranks (3 "
             "after a resize)." % (command, seconds / 60, config.seed, config.faults, config.rows,
                                   config.feature_size, config.epochs, config.batch_size, config.checkpoint_steps,
                                   config.ps_workers, epochs_of(config, "ps")), ""]
    rows = []
    for result in results:
        soak = result["faulted"] or {}
        lost = [f["steps_lost"] or 0 for f in soak.get("faults", [])]
        auc = soak.get("metrics", {}).get("auc")
        reference_aucs = [r["metrics"]["auc"] for r in result["references"] if r["metrics"].get("auc") is not None]
        nearest = min(reference_aucs, key=lambda value: abs(value - auc)) if auc is not None and reference_aucs \
            else None
        loss = soak.get("metrics", {}).get("logloss")
        reference_losses = [r["metrics"]["logloss"] for r in result["references"]
                            if r["metrics"].get("logloss") is not None]
        base_rate = result.get("base_rate_logloss")
        rows.append([result["strategy"], str(len(soak.get("faults", []))), str(soak.get("restarts", "-")),
                     "%d (max %d)" % (sum(lost), max(lost)) if lost else "-",
                     " / ".join("%.4f" % a for a in reference_aucs) or "-",
                     "%.4f" % auc if auc is not None else "-",
                     "%+.4f" % (auc - nearest) if nearest is not None else "-",
                     " / ".join("%.4f" % value for value in reference_losses) or "-",
                     "%.4f" % loss if loss is not None else "-",
                     "%.4f" % base_rate if base_rate is not None else "-",
                     "%s / %.0f" % (" / ".join("%.0f" % r["seconds"] for r in result["references"]),
                                    soak.get("seconds", 0)),
                     "%d/%d" % (sum(c["passed"] for c in result["checks"]), len(result["checks"]))])
    lines += [common.markdown_table(["strategy", "faults", "restarts", "steps lost (total)", "AUC fault-free",
                                     "AUC faulted", "AUC difference (nearest)", "log loss fault-free",
                                     "log loss faulted", "log loss of the base rate",
                                     "seconds (fault-free / faulted)", "checks passed"], rows), ""]
    for result in results:
        lines += ["## %s" % result["strategy"], ""]
        soak = result["faulted"] or {}
        fault_rows = []
        for f in soak.get("faults", []):
            kind = f["fault"]["kind"] + (" to %d ranks" % f["fault"]["size"] if f["fault"]["size"] else "")
            fault_rows.append([str(f["number"]), kind, f["target"], f["signal"], "%.0f" % f["elapsed"],
                               str(f["step_at_fault"]), str(f["checkpoint_at_fault"]), f["placement"], f["restart"],
                               str(f["resume_step"]), str(f["steps_lost"])])
        if fault_rows:
            counts = collections.Counter(f["fault"]["kind"] for f in soak.get("faults", []))
            lines += ["Faults by kind: %s." % ", ".join("%s %d" % (kind, counts[kind]) for kind in KINDS
                                                       if counts[kind]), ""]
            lines += [common.markdown_table(["#", "fault", "target", "signal", "at s", "step", "checkpoint then",
                                             "placement", "restart", "resumed at", "steps lost"], fault_rows), ""]
        lines += [common.markdown_table(["check", "result", "detail"],
                                        [[c["name"], "pass" if c["passed"] else "FAIL", c["detail"].replace("|", "/")]
                                         for c in result["checks"]]), ""]
    lines += ["## lscpu", "", "```", lscpu(), "```"]
    return "\n".join(lines)


def write(args: SoakCommand, config: SoakConfig, command: str, results: List[dict], seconds: float) -> str:
    """Writes the report of the strategies soaked so far; paths under the working directory are relative."""
    missing = [s for s in config.strategies if s not in [r["strategy"] for r in results]]
    interrupted = [r["strategy"] for r in results if r.get("interrupted")]
    body = report(config, command, results, seconds)
    if missing or interrupted:
        body = ("**Incomplete**: %s. The command below runs the whole soak.\n\n" % "; ".join(
            (["the soak was interrupted during %s" % ", ".join(interrupted)] if interrupted else [])
            + (["not soaked (yet): %s" % ", ".join(missing)] if missing else []))) + body
    raw = {"command": command, "config": dataclasses.asdict(config), "seconds": seconds, "lscpu": lscpu(),
           "strategies": results, "complete": not missing and not interrupted}
    raw = json.loads(json.dumps(raw).replace(config.work_dir, WORK_DIR_MARK))
    return common.write_report(args.name, "Soak: faults under deepfm.launch, checked to lose nothing",
                               body.replace(config.work_dir, WORK_DIR_MARK), common.machine_info(), raw,
                               results_dir=args.results_dir)
