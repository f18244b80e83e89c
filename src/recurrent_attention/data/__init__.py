"""Shared data plumbing: the source registry, verified download, the mirror folder."""

from recurrent_attention.data.download import (
    describe_origin,
    own_or_registered,
    resolve_file,
    resolve_source,
    sha256sum,
)
from recurrent_attention.data.sources import Source, get_source, registry
from recurrent_attention.errors import DataError  # here too: every reader raises it

__all__ = [
    "DataError",
    "Source",
    "describe_origin",
    "get_source",
    "own_or_registered",
    "registry",
    "resolve_file",
    "resolve_source",
    "sha256sum",
]
