"""UNS benchmark: ``python -m bench [--quick]`` (see README, "Benchmark")."""
