"""Shared data plumbing: the source registry, verified download, the mirror folder."""

from recurrent_attention.data.download import (
    DataLocation,
    describe_origin,
    resolve_file,
    resolve_source,
    sha256sum,
)
from recurrent_attention.data.sources import Source, get_source, registry
from recurrent_attention.errors import DataError  # here too: every reader raises it

__all__ = [
    "DataError",
    "DataLocation",
    "Source",
    "describe_origin",
    "get_source",
    "registry",
    "resolve_file",
    "resolve_source",
    "sha256sum",
]
