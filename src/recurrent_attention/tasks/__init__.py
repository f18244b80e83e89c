"""Task families: each folder holds data.py (datamodule), head.py, module.py, metrics.py."""
