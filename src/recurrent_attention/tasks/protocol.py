"""What a benchmark protocol is: a frozen object whose fields are the rules it changes, by name.

A family's protocols (``task.compat``: ``default``, ``reference``, ...) differ in a few rules (a
dropped last test batch, an NLL normaliser, a trajectory sampling). Each family writes those rules
once, as a subclass of :class:`TaskProtocol` in ``tasks/<family>/protocol.py``, and each protocol
as one file of ``conf/task/<family>/protocol/`` that fills its fields. The family's ``_base.yaml``
places every such file at ``task.protocols.<name>`` and selects ``task.rules`` by ``task.compat``;
datamodules and modules receive ``task.rules`` as the object (Hydra instantiates it) and read its
fields, never the protocol's name. The object checks its own values where it is made, so a bad
field is one :class:`ConfigError` line naming it.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, ClassVar

from recurrent_attention.errors import ConfigError

KIND_WORDS = {bool: "true or false", int: "an integer", str: "a string"}


@dataclasses.dataclass(frozen=True)
class TaskProtocol:
    """Base of a family's protocol: subclasses add typed fields (``bool``, ``int`` or ``str``, checked
    here; a field of another type, such as a scheduler partial, is checked where it is used).

    ``family`` names the family (for the error line), ``choices`` the values a ``str`` field may
    take where it is one of a few, ``minimum`` the least value of an ``int`` field."""

    family: ClassVar[str] = ""
    choices: ClassVar[dict[str, tuple[str, ...]]] = {}
    minimum: ClassVar[dict[str, int]] = {}

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            kind = hints[field.name]
            options = self.choices.get(field.name)
            if kind in KIND_WORDS and type(value) is not kind:
                self._refuse(field.name, value, KIND_WORDS[kind])
            if options is not None and value not in options:
                self._refuse(field.name, value, f"one of {', '.join(options)}")
            if field.name in self.minimum and value < self.minimum[field.name]:
                self._refuse(field.name, value, f"an integer >= {self.minimum[field.name]}")

    def _refuse(self, name: str, value: Any, allowed: str) -> None:
        raise ConfigError(
            f"task.rules.{name}={value!r} is not allowed: use {allowed} "
            f"(conf/task/{self.family}/protocol/, or task.protocols.<name>.{name}=...)"
        )
