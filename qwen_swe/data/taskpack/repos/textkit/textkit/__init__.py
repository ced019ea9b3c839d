"""textkit: small text helpers."""

from textkit.case import snake_to_camel
from textkit.slug import slugify
from textkit.truncate import shorten, truncate

__all__ = ["shorten", "slugify", "snake_to_camel", "truncate"]
