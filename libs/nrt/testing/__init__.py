"""Helpers shared by the test suite and the benchmarks (real data, never fakes of services)."""
