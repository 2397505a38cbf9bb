"""Relay's benchmarks: ``python -m bench [NAME ...] [--quick]`` runs them and prints one table."""
