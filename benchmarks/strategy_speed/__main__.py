"""`python -m benchmarks.strategy_speed`: see the package docstring."""

import sys

from benchmarks.strategy_speed.cli import main

if __name__ == "__main__":
    sys.exit(main())
