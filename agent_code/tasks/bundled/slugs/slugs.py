"""URL slugs for blog post titles."""

import re


def slugify(title: str) -> str:
    """'Hello, World!' -> 'hello-world'."""
    words = re.findall(r"[A-Za-z0-9]+", title)
    return "-".join(words)


def unique_slug(title: str, taken: set[str]) -> str:
    """A slug for ``title`` that is not in ``taken`` (adds -2, -3, ... when needed)."""
    base = slug = slugify(title)
    n = 2
    while slug in taken:
        slug = f"{base}-{n}"
        n += 1
    return slug
