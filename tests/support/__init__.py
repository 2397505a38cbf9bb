"""Shared test support: services, backend URLs per test, and real-process helpers."""
