"""`python -m benchmarks.strategy_speed`: see the package docstring."""

from benchmarks.strategy_speed.cli import main

if __name__ == "__main__":
    main()
