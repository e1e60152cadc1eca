"""`python -m benchmarks.scale_out`: see the package docstring."""

from benchmarks.scale_out.cli import main

if __name__ == "__main__":
    main()
