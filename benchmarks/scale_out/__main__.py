"""`python -m benchmarks.scale_out`: see the package docstring."""

import sys

from benchmarks.scale_out.cli import main

if __name__ == "__main__":
    sys.exit(main())
