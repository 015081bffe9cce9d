"""What every wire protocol shares. So far: the random ids of replies, items and tool calls."""

from __future__ import annotations

import secrets
import string

ID_ALPHABET = string.ascii_letters + string.digits
# byte -> letter or digit, the top 8 byte values dropped (256 = 4 * 62 + 8), so each is equally likely
_TO_ALPHABET = bytes(ord(ID_ALPHABET[b % len(ID_ALPHABET)]) for b in range(256))
_UNEVEN = bytes(range(4 * len(ID_ALPHABET), 256))


def random_id(prefix: str, length: int) -> str:
    """``prefix`` and ``length`` random letters and digits (from the OS's secure source, one
    call: ids are minted per reply and per tool call, so this is on every turn's path)."""
    out = b""
    while len(out) < length:
        out += secrets.token_bytes(length + 8).translate(_TO_ALPHABET, _UNEVEN)
    return prefix + out[:length].decode("ascii")
