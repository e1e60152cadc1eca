"""The flags of `python -m deepfm.train` are a public interface: their names, types and defaults are pinned.

Every flag `--help` lists today must stay, with the same type, default and
choices, however the flags are defined (by hand or generated from the
configuration dataclasses). A flag may be added; renaming or removing one
changes this pin. The command runs as a user runs it: `python -m
deepfm.train --helpxml` from the repository root with a minimal
environment.
"""

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ElementTree

import tensorflow as tf

from tests import paths

TIMEOUT_S = 120
# absl's --helpxml ends the program with exit status 1 after printing.
HELPXML_EXIT = 1
NO_DEFAULT = None
# name: (absl's type, the default as --help shows it, the Python default, the choices of an enum).
PINNED = {
    "amp": ("bool", "false", False, ()),
    "batch_norm": ("bool", "false", False, ()),
    "batch_size": ("int", "1024", 1024, ()),
    "cache": ("string", "", NO_DEFAULT, ()),
    "check_ids": ("bool", "true", True, ()),
    "check_memory": ("bool", "true", True, ()),
    "cross_device_ops": ("string enum", "reduction_to_one_device", "reduction_to_one_device",
                         ("reduction_to_one_device", "hierarchical_copy", "nccl")),
    "cross_layers": ("int", "3", 3, ()),
    "data_format": ("string enum", "tfrecord", "tfrecord", ("tfrecord", "tfrecord_packed", "libsvm")),
    "dedup_lookups": ("bool", "false", False, ()),
    "deep_layers": ("comma separated list of strings", "128,64,32", ["128", "64", "32"], ()),
    "device_type": ("string enum", "auto", "auto", ("auto", "cpu", "gpu")),
    "dropout": ("comma separated list of strings", "0.5,0.5,0.5", ["0.5", "0.5", "0.5"], ()),
    "early_stopping_patience": ("int", "", NO_DEFAULT, ()),
    "embedding_size": ("int", "32", 32, ()),
    "eval_every_n_steps": ("int", "", NO_DEFAULT, ()),
    "exchange_fp16": ("bool", "false", False, ()),
    "exchange_pipeline": ("bool", "true", True, ()),
    "exchange_staleness": ("int", "0", 0, ()),
    "export_dir": ("string", "", NO_DEFAULT, ()),
    "feature_size": ("int", "", NO_DEFAULT, ()),
    "field_size": ("int", "", NO_DEFAULT, ()),
    "hvd_compression": ("string enum", "none", "none", ("none", "fp16")),
    "hvd_cycle_time_ms": ("float", "-1.0", -1.0, ()),
    "hvd_fusion_threshold_bytes": ("int", "-1", -1, ()),
    "hvd_groups": ("int", "0", 0, ()),
    "id_capacity": ("int", "-1", -1, ()),
    "input_autotune": ("bool", "false", False, ()),
    "input_mode": ("string enum", "file", "file", ("file", "pipe")),
    "inter_op_threads": ("int", "0", 0, ()),
    "intra_op_threads": ("int", "0", 0, ()),
    "kmp_affinity": ("string", "", "", ()),
    "l2_reg": ("float", "0.0001", 0.0001, ()),
    "large_batch_base": ("int", "1024", 1024, ()),
    "large_batch_rule": ("string enum", "none", "none", ("none", "cowclip")),
    "large_batch_warmup_examples": ("int", "", NO_DEFAULT, ()),
    "large_batch_warmup_steps": ("int", "", NO_DEFAULT, ()),
    "learning_rate": ("float", "0.0005", 0.0005, ()),
    "log_every_n_steps": ("int", "100", 100, ()),
    "lr_scale_cap": ("float", "1.5", 1.5, ()),
    "lr_scaling": ("string enum", "capped", "capped", ("none", "linear", "sqrt", "capped")),
    "max_steps": ("int", "", NO_DEFAULT, ()),
    "metrics_file": ("string", "", NO_DEFAULT, ()),
    "metrics_port": ("int", "", NO_DEFAULT, ()),
    "model": ("string enum", "deepfm", "deepfm", ("deepfm", "dcn")),
    "model_dir": ("string", "", NO_DEFAULT, ()),
    "num_devices": ("int", "0", 0, ()),
    "num_epochs": ("int", "1", 1, ()),
    "omp_num_threads": ("int", "0", 0, ()),
    "optimizer": ("string enum", "lazy_adam", "lazy_adam", ("adam", "lazy_adam", "adagrad", "momentum", "ftrl", "sgd")),
    "progress_file": ("string", "", NO_DEFAULT, ()),
    "ps_lr_factor": ("float", "1.0", 1.0, ()),
    "ps_towers": ("int", "0", 0, ()),
    "s3_sharded": ("bool", "false", False, ()),
    "save_checkpoints_steps": ("int", "1000", 1000, ()),
    "seed": ("int", "", NO_DEFAULT, ()),
    "shuffle_buffer": ("int", "0", 0, ()),
    "skip_bad_records": ("bool", "false", False, ()),
    "sparse_as_dense": ("bool", "false", False, ()),
    "strategy": ("string enum", "single", "single", ("auto", "horovod", "hybrid", "mirrored", "ps", "single", "tower")),
    "table_partitions": ("int", "1", 1, ()),
    "trace_dir": ("string", "", NO_DEFAULT, ()),
    "trace_steps": ("int", "0", 0, ()),
    "train_channels": ("comma separated list of strings", "", [], ()),
    "train_data": ("comma separated list of strings", "", NO_DEFAULT, ()),
    "val_channel": ("string", "", NO_DEFAULT, ()),
    "val_data": ("comma separated list of strings", "", NO_DEFAULT, ()),
    "xla": ("bool", "false", False, ()),
}
# Prints each flag's Python default after the entry point defined its flags.
PYTHON_DEFAULTS = """
import json
from absl import flags
from deepfm import train
train.define_flags()
print(json.dumps({name: flags.FLAGS[name].default for name in flags.FLAGS}))
"""


def _user_env():
    """What a user's shell gives the command: PATH (this Python's first) and HOME."""
    return {"PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
            "HOME": os.environ.get("HOME", paths.REPO_ROOT)}


class TrainFlagsTest(tf.test.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        commands = ([sys.executable, "-m", "deepfm.train", "--helpxml"], [sys.executable, "-c", PYTHON_DEFAULTS])
        runs = [subprocess.Popen(command, cwd=paths.REPO_ROOT, env=_user_env(), stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True) for command in commands]
        outputs = [run.communicate(timeout=TIMEOUT_S) for run in runs]
        for command, run, (_, stderr), expected in zip(commands, runs, outputs, (HELPXML_EXIT, 0)):
            if run.returncode != expected:
                raise AssertionError("%s failed (%d): %s" % (command, run.returncode, stderr[-3000:]))
        root = ElementTree.fromstring(outputs[0][0])
        cls.shown = {flag.findtext("name"): flag for flag in root.findall("flag") if flag.findtext("key") == "yes"}
        cls.python_defaults = json.loads(outputs[1][0].strip().splitlines()[-1])

    def test_every_pinned_flag_is_listed_by_help_with_its_type_default_and_choices(self):
        self.assertEmpty(sorted(set(PINNED) - set(self.shown)), "flags --help no longer lists")
        for name, (flag_type, shown_default, _, choices) in PINNED.items():
            flag = self.shown[name]
            self.assertEqual((flag_type, shown_default, choices),
                             (flag.findtext("type"), flag.findtext("default") or "",
                              tuple(value.text for value in flag.findall("enum_value"))), name)

    def test_every_pinned_flag_has_its_python_default(self):
        for name, (_, _, python_default, _) in PINNED.items():
            self.assertIn(name, self.python_defaults)
            self.assertEqual(python_default, self.python_defaults[name], name)


if __name__ == "__main__":
    tf.test.main()
