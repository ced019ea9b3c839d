"""textkit: small text helpers."""

from textkit.case import camel_to_snake, snake_to_camel
from textkit.slug import slugify
from textkit.truncate import shorten, truncate

__all__ = ["camel_to_snake", "shorten", "slugify", "snake_to_camel", "truncate"]
