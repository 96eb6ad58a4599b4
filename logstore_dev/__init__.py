"""The development setup: local services, the test environment and the demo (never shipped in the wheel)."""
