"""Token sequences that share storage with the sequence they extend.

A session's turn ``n`` is prompted with what turn ``n - 1`` held (its prompt and its output)
plus a few new ids, so storing every prompt whole costs the sum of all prompts: quadratic in
the session. A :class:`TokenSeq` is instead *the first ``keep`` ids of ``base``, then
``own``*: each turn stores only its new ids, and a session's ids are held about once.

It reads like an ``array('i')`` where the gateway and the sample builder need it to (length,
indexing, slicing, iteration, ``==``, :meth:`tolist`); :meth:`array` rebuilds the whole
sequence as one block (what an engine is sent, once per turn).
"""

from __future__ import annotations

from array import array
from typing import Any, Iterable, Iterator, Sequence, overload

IdArray = array  # ``array('i')``, by a name no method below shadows (TokenSeq.array)

__all__ = ["TokenSeq"]


class TokenSeq(Sequence[int]):
    """``base[:keep] + own`` without copying ``base`` (see the module doc). ``origin`` is the
    index of the turn whose held sequence this is (set by :meth:`TurnRecord.held`), so a
    writer can store a prompt as a reference to that turn."""

    __slots__ = ("own", "base", "keep", "origin", "_len")

    def __init__(self, own: Iterable[int] = (), base: "TokenSeq | None" = None, keep: int = 0,
                 origin: int | None = None) -> None:
        self.own = own if isinstance(own, array) and own.typecode == "i" else array("i", own)
        if base is None:
            keep = 0
        elif not 0 <= keep <= len(base):
            raise ValueError(f"keep={keep} is outside the base sequence (length {len(base)})")
        self.base, self.keep, self.origin = base, keep, origin
        self._len = keep + len(self.own)

    @classmethod
    def of(cls, ids: "Iterable[int] | TokenSeq") -> "TokenSeq":
        """``ids`` as a sequence of its own (a TokenSeq is returned as it is)."""
        return ids if isinstance(ids, TokenSeq) else cls(ids)

    def extend(self, own: Iterable[int], keep: int | None = None, origin: int | None = None) -> "TokenSeq":
        """A new sequence: the first ``keep`` ids of this one (all by default), then ``own``."""
        return TokenSeq(own, self, len(self) if keep is None else keep, origin)

    def __len__(self) -> int:
        return self._len

    def array(self) -> array:
        """The whole sequence as one ``array('i')`` (a fresh copy)."""
        pieces: list[array] = []
        node: TokenSeq | None = self
        need = self._len
        while node is not None and need > 0:
            if need > node.keep:
                own = node.own
                pieces.append(own if need - node.keep == len(own) else own[:need - node.keep])
                need = node.keep
            node = node.base
        out = array("i")
        for piece in reversed(pieces):
            out.extend(piece)
        return out

    def tolist(self) -> list[int]:
        return self.array().tolist()

    def __iter__(self) -> Iterator[int]:
        return iter(self.array())

    @overload
    def __getitem__(self, i: int) -> int: ...

    @overload
    def __getitem__(self, i: slice) -> IdArray: ...

    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):
            start, stop, step = i.indices(self._len)
            if step == 1 and stop <= self.keep and self.base is not None:
                return self.base[start:stop]
            return self.array()[i]
        if i < 0:
            i += self._len
        if not 0 <= i < self._len:
            raise IndexError("TokenSeq index out of range")
        node: TokenSeq = self
        while i < node.keep:
            assert node.base is not None
            node = node.base
        return node.own[i - node.keep]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TokenSeq):
            return other is self or (len(other) == self._len and other.array() == self.array())
        if isinstance(other, array):
            return len(other) == self._len and self.array() == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable-looking, like array

    def __repr__(self) -> str:
        return f"TokenSeq(len={self._len}, own={len(self.own)}, keep={self.keep})"

    def stored(self) -> int:
        """Ids this object stores itself (not counting its base)."""
        return len(self.own)


def as_ids(ids: Sequence[int]) -> array:
    """Any id sequence as one ``array('i')`` (a TokenSeq rebuilt, an array as it is)."""
    if isinstance(ids, TokenSeq):
        return ids.array()
    return ids if isinstance(ids, array) and ids.typecode == "i" else array("i", ids)
