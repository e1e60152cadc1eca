"""The registered names of the strategies, defined once.

Each adapter module registers itself under its name here; the job layer
(`jobs/`), which must not import TensorFlow, launches strategies by these
names too. This module imports nothing.
"""

SINGLE = "single"
TOWER = "tower"
MIRRORED = "mirrored"
PS = "ps"
HOROVOD = "horovod"
HYBRID = "hybrid"
AUTO = "auto"

# Every name, in the order the documentation lists them.
ALL = (SINGLE, TOWER, MIRRORED, PS, HOROVOD, HYBRID, AUTO)
# The strategies whose processes are Horovod ranks (started by horovodrun or mpirun).
HOROVOD_RANKS = (HOROVOD, HYBRID)
