"""The project's one-line error types, in a leaf module every layer may import.

``train.py`` prints each as one ``error:`` line and exits 2 instead of a traceback. They live
here, with nothing but the standard library, so that raising one (a datamodule refusing a config
value, a reader refusing a file) loads no other part of the package (``config_checks`` would
bring every family's rules with it).
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A config value outside what the run accepts; the message names the key, the value and the fix."""


class DataError(ValueError):
    """Missing, corrupt or malformed data: the one-line message names the file, the problem and the fix.

    A ``ValueError``, since a bad file is a bad input value; callers that catch ``ValueError`` from a
    reader keep working.
    """


class DataMissingError(DataError):
    """Data that is neither on this machine nor fetchable: the run failed before reading any.

    Its ``failed.json`` says so (``data_read: false``), so that a table does not count it as a
    failed seed of that dataset's row: the data was never there to fail on.
    """


class CheckpointError(ValueError):
    """A checkpoint the run cannot resume from: the one-line message names the file, why, and the fix."""
