"""Efficiency measurements: operator speed vs SDPA, streaming memory/time, FLOPs (scripts call these)."""
