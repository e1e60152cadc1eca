"""How an adapter declares its own options: dataclass fields that are command-line flags too.

Each adapter keeps its options in a frozen dataclass (`Strategy.Options`)
whose fields are made with `option`: the field's name is the flag's name,
its default the flag's default, and its metadata the flag's help text and
choices (`deepfm.train` defines the flags from them with `cli.config_flags`). The dataclass checks
its values in `__post_init__` with `check_choice` and `check_at_least`,
whose messages name the flag.
"""

import dataclasses
from typing import Optional, Sequence

from cli import config_flags

# The metadata keys of an `option` field (`cli.config_flags`'s, which defines the flags).
HELP = config_flags.HELP
CHOICES = config_flags.CHOICES


def check_choice(flag: str, value, allowed) -> None:
    """Raises ValueError naming `--flag`, the bad value and the allowed ones."""
    if value not in allowed:
        raise ValueError("--%s must be one of %s, got %r" % (flag, ", ".join(map(str, allowed)), value))


def check_at_least(flag: str, value, minimum) -> None:
    """Raises ValueError naming `--flag` and the bad value unless `value >= minimum`."""
    if value < minimum:
        raise ValueError("--%s must be >= %g, got %r" % (flag, minimum, value))


def option(default, help: str, choices: Optional[Sequence] = None):
    """A field of an options dataclass, with the help text (and choices) its command-line flag shows.

    The field's name is the flag's name (`cli.config_flags.field`).
    """
    return config_flags.field(default, help, choices=choices)


@dataclasses.dataclass(frozen=True)
class NoOptions:
    """The options of an adapter that has none of its own."""
