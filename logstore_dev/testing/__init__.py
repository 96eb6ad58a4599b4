"""Helpers for tests of LogStore pipelines (used by this project's suite; usable by users' suites)."""
