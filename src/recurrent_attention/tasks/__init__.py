"""Task families: each folder holds data.py (datamodule), head.py, module.py, metrics.py where the
family has its own, and checks.py where it has config rules or resolvers of its own."""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil


def register_families() -> None:
    """Import every family's ``checks.py``, whose rules (``config_checks``) and resolvers (``config``)
    register themselves there: the core imports no family, so whatever composes or checks a
    family's config calls this first (``train.py`` on import, before Hydra resolves the run's
    folder name). Families are the packages here, found by name; importing again is free."""
    for family in pkgutil.iter_modules(__path__):
        checks = f"{__name__}.{family.name}.checks"
        if family.ispkg and importlib.util.find_spec(checks) is not None:
            importlib.import_module(checks)
