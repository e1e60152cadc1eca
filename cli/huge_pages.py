"""Transparent huge pages for large embedding tables: a command restarts itself with glibc's `hugetlb` tunable.

A step touches a few thousand rows of each table at random. With the
kernel's 4 KiB pages every row of a table of gigabytes is its own TLB miss,
and the page tables themselves no longer stay in the cache; with 2 MiB pages
the walks mostly hit it. Where the kernel gives huge pages only to memory
that asks for them (`/sys/kernel/mm/transparent_hugepage/enabled` is
`madvise`, the default of many distributions), glibc asks for them on every
large allocation when its tunable `glibc.malloc.hugetlb=1` is set (glibc 2.35
and later). A tunable is read only when a process starts, so a command whose
tables need it executes itself again, in the same process (same pid, same
arguments), with the tunable added to `GLIBC_TUNABLES`.

It does so only where it helps and nothing decided otherwise: tables of at
least `MIN_TABLE_BYTES`, the kernel in `madvise` mode, glibc 2.35 or later,
and no `GLIBC_TUNABLES` in the environment (any value of it, e.g.
`glibc.malloc.hugetlb=0`, keeps the process as it is). docs/large_tables.md,
"Tables larger than a host", has the measurements.
"""

import os
import sys
from typing import Mapping, Optional, Sequence

from absl import logging

TUNABLES_ENV = "GLIBC_TUNABLES"
HUGE_PAGES_TUNABLE = "glibc.malloc.hugetlb=1"
THP_MODE_FILE = "/sys/kernel/mm/transparent_hugepage/enabled"
# The mode in which only memory that asks gets huge pages: the one mode where the tunable changes anything.
THP_MADVISE = "madvise"
# The first glibc with `glibc.malloc.hugetlb`.
MIN_GLIBC = (2, 35)
# Tables (weights alone) from this size on: below it they fit the caches' reach of 4 KiB pages well enough.
MIN_TABLE_BYTES = 1 << 30


def thp_mode(path: str = THP_MODE_FILE) -> Optional[str]:
    """The kernel's transparent huge page mode (`always`, `madvise`, `never`), None where it has none."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    selected = [word[1:-1] for word in text.split() if word.startswith("[") and word.endswith("]")]
    return selected[0] if selected else None


def glibc_version() -> Optional[tuple]:
    """(major, minor) of the C library, None where it is not glibc."""
    try:
        name = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):
        return None
    parts = name.split()
    if len(parts) != 2 or parts[0] != "glibc":
        return None
    try:
        return tuple(int(part) for part in parts[1].split(".")[:2])
    except ValueError:
        return None


def wanted(table_bytes: int, environ: Mapping[str, str], mode: Optional[str], glibc: Optional[tuple]) -> bool:
    """Whether a process with tables of `table_bytes` should restart with the tunable."""
    return (table_bytes >= MIN_TABLE_BYTES and TUNABLES_ENV not in environ and mode == THP_MADVISE
            and glibc is not None and glibc >= MIN_GLIBC)


def restart_with_huge_pages(table_bytes: int, argv: Optional[Sequence[str]] = None) -> None:
    """Executes this process again with `GLIBC_TUNABLES=glibc.malloc.hugetlb=1` where `wanted` says so.

    Call it before the process has done anything it would not do twice
    (after parsing its flags, before any file, server or collective): the
    new image starts from the beginning, with the same pid and arguments.
    Returns only where nothing is to be done.

    Args:
      table_bytes: bytes of the model's tables (weights alone).
      argv: the command line to execute; default: the interpreter's own
        (`sys.orig_argv`, `-m` included).
    """
    if not wanted(table_bytes, os.environ, thp_mode(), glibc_version()):
        return
    argv = list(argv if argv is not None else sys.orig_argv)
    logging.info("tables of %.2f GB: starting again with %s=%s (transparent huge pages)", table_bytes / 1e9,
                 TUNABLES_ENV, HUGE_PAGES_TUNABLE)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, argv, dict(os.environ, **{TUNABLES_ENV: HUGE_PAGES_TUNABLE}))
