"""Griffe extension: Sphinx cross-reference roles (:class:`x`) rendered as code (`x`)."""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:class|meth|func|mod|attr|data|exc|obj):`~?([^`]+)`")


class SphinxRoles(griffe.Extension):
    """Rewrite the roles of every docstring as inline code."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(r"`\1`", obj.docstring.value)
