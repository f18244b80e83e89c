"""One module per task family; each defines ``build(runs, reference_dir) -> list[Table]``.

Modules are discovered by name, so adding a family's tables means adding a module here.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from recurrent_attention.results.tables import Table

Builder = Callable[[pd.DataFrame, Path | None], list[Table]]


def builders() -> dict[str, Builder]:
    """Family name -> its table builder, for every module in this package."""
    found = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        found[info.name] = module.build
    return found
