"""Reply and tool-call ids: random letters from the OS's secure source, each handed out once."""

from __future__ import annotations


def test_ids_from_the_pool_are_unique_and_a_forked_child_draws_its_own() -> None:
    import os

    from agent_code.protocols.common import ID_ALPHABET, random_id

    ids = [random_id("toolu_", 24) for _ in range(20_000)]
    assert len(set(ids)) == len(ids) and all(set(i[6:]) <= set(ID_ALPHABET) and len(i) == 30 for i in ids)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:   # the child: the ids it mints next
        os.write(write, " ".join(random_id("x", 24) for _ in range(20)).encode())
        os._exit(0)
    os.waitpid(pid, 0)
    child = os.read(read, 65536).decode().split()
    parent = [random_id("x", 24) for _ in range(20)]
    assert len(child) == 20 and not set(child) & set(parent)
