"""Nothing heavy on the event loop: while one request's 10 MB body is parsed, translated,
rendered and tokenized (worker threads; the tokenizer lets go of the GIL), /healthz and a small
request of another session still answer at once."""

from __future__ import annotations

import json
import threading
import time

import httpx

from agent_code.render.template import LONG_DECODE, LONG_TEXT, backend_decode, backend_encode
from gateway_fixtures import qwen3_renderer, scripted_gateway


def test_a_10_mb_request_does_not_hold_up_healthz_or_another_session(tmp_path):
    renderer = qwen3_renderer()
    lines = [{"text": "small one", "session": "small"}] * 6 + [{"text": "big one", "session": "big"}]
    big_body = json.dumps({"model": "m", "max_tokens": 8, "messages": [
        {"role": "user", "content": "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghij " * 160_000}]}).encode()
    assert len(big_body) >= 10_000_000
    with scripted_gateway(tmp_path, lines, renderer) as (url, gateway):
        big: dict = {}

        def send_big() -> None:
            started = time.perf_counter()
            r = httpx.post(f"{url}/v1/messages", content=big_body, headers={"x-api-key": "big", "content-type": "application/json"},
                           timeout=300)
            big.update(status=r.status_code, text=r.json()["content"][0]["text"] if r.status_code == 200 else r.text,
                       seconds=time.perf_counter() - started)

        thread = threading.Thread(target=send_big)
        thread.start()
        with httpx.Client(base_url=url, timeout=30) as client:
            time.sleep(1.0)  # the body is in; the gateway works on it
            probes = []
            for _ in range(3):
                if not thread.is_alive():
                    break
                t0 = time.perf_counter()
                assert client.get("/healthz").status_code == 200
                t1 = time.perf_counter()
                small = client.post("/v1/messages", headers={"x-api-key": "small"}, json={
                    "model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]})
                t2 = time.perf_counter()
                assert small.status_code == 200 and small.json()["content"][0]["text"] == "small one"
                probes.append((t1 - t0, t2 - t1, thread.is_alive()))
                time.sleep(0.2)  # all three probes well inside the big request's ~2 s (a faster gateway ends it sooner)
        thread.join(300)
    assert big.get("status") == 200 and big["text"] == "big one", big
    assert probes and all(alive for _, _, alive in probes), (probes, big)  # measured while it worked
    assert all(h < 1.0 and s < 1.0 for h, s, _ in probes), probes


def test_long_texts_tokenize_to_the_same_ids_through_the_batch_call():
    renderer = qwen3_renderer()
    backend = renderer._backend
    for text in ["x" * (LONG_TEXT + 5), "def f(x):\n    return x  # é, 中文, <|im_end|>\n" * 2000,
                 " " * LONG_TEXT + "a", "🙂" * (LONG_TEXT // 2) + "b"]:
        assert backend_encode(backend, text) == backend.encode(text, add_special_tokens=False).ids


def test_long_ids_decode_to_the_same_text_through_the_batch_call():
    """backend_decode lets go of the GIL for long ids (decode_batch): the same text as decode,
    special tokens, characters split across tokens and ids that end inside one included."""
    renderer = qwen3_renderer()
    backend = renderer._backend
    text = "def f(x):\n    return x  # é, 中文, 🙂<|im_end|>\n<|im_start|>user\n" * 300
    ids = renderer.encode(text)
    assert len(ids) > LONG_DECODE
    for case in (ids, ids[:LONG_DECODE], ids[:LONG_DECODE + 1], ids[1:-1], ids[3:] + ids[:5]):
        assert backend_decode(backend, case) == backend.decode(case, skip_special_tokens=False)
    split = ids + renderer.encode("𓀀")[:2]  # a character whose bytes end before its last token
    assert backend.decode(split).endswith("\ufffd")
    assert backend_decode(backend, split) == backend.decode(split, skip_special_tokens=False)


def test_decode_takes_any_sequence_of_integers():
    """Renderer.decode reads a list as it is and any other sequence (a tuple, an array, numpy's
    integers, bools) as its ints: the text of the same ids every way."""
    import array

    import numpy

    renderer = qwen3_renderer()
    ids = renderer.encode("print('hi')<|im_end|>\n" * 400)
    expected = renderer._backend.decode(ids, skip_special_tokens=False)
    for shaped in (ids, tuple(ids), array.array("i", ids), numpy.array(ids, dtype=numpy.int64),
                   list(numpy.array(ids, dtype=numpy.int32))):
        assert renderer.decode(shaped) == expected
    assert renderer.decode([True, False]) == renderer.decode([1, 0])


def test_the_batcher_runs_waiting_items_together_and_keeps_each_exception_to_its_own_caller():
    import asyncio

    from agent_code.gateway.offload import Batcher

    calls: list[list[int]] = []
    gate, entered = threading.Event(), threading.Event()

    def run_many(items: list[int]) -> list[int]:
        entered.set()
        gate.wait(10)
        calls.append(list(items))
        if 13 in items:
            raise ValueError(f"unlucky {items}")
        return [i * 10 for i in items]

    batcher = Batcher(run_many, name="test-batch")

    async def main() -> list:
        first = asyncio.ensure_future(batcher(1))
        while not entered.is_set():          # the thread holds item 1 (waiting at the gate)
            await asyncio.sleep(0.01)
        rest = [asyncio.ensure_future(batcher(i)) for i in (2, 13, 4)]
        cancelled = asyncio.ensure_future(batcher(5))
        await asyncio.sleep(0.05)
        cancelled.cancel()
        gate.set()
        return await asyncio.gather(first, *rest, cancelled, return_exceptions=True)

    one, two, thirteen, four, five = asyncio.run(main())
    assert (one, two, four) == (10, 20, 40)
    assert isinstance(thirteen, ValueError) and "13" in str(thirteen)
    assert isinstance(five, asyncio.CancelledError)
    assert calls[0] == [1] and calls[1] == [2, 13, 4, 5]          # the waiting ones as one batch
    assert [2] in calls[2:] and [13] in calls[2:] and [4] in calls[2:]   # then alone, after it failed


def test_encode_many_gives_each_text_its_own_ids():
    renderer = qwen3_renderer()
    texts = ["<|im_end|>\n<|im_start|>user\n<tool_response>\nx = 1\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
             "a", "", "def f(x):\n    return x  # é, 中文\n" * 40, "🙂" * 7]
    assert renderer.encode_many(texts) == [renderer.encode(t) for t in texts]
    assert renderer.encode_many(texts[:1]) == [renderer.encode(texts[0])]


def test_long_suffixes_tokenized_off_the_loop_give_the_prompt_a_full_render_gives(tmp_path, monkeypatch):
    """Turns whose new tool results are long (their suffix is tokenized in the gateway's
    tokenizing thread, several sessions at once) are prompted exactly as a full render of the
    conversation would prompt them."""
    import asyncio

    from agent_code.gateway import turn_flow
    from agent_code.gateway.turn_flow import OFF_LOOP_SUFFIX_CHARS

    monkeypatch.setattr(turn_flow, "OFF_LOOP_MIN_ANSWERING", 1)   # off the loop even when alone

    renderer = qwen3_renderer()
    call = '<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}\n</tool_call>'
    sessions, turns = 6, 4
    lines = [{"text": call, "session": f"s{i}"} for _ in range(turns) for i in range(sessions)]
    tools = [{"name": "read_file", "description": "Read a file.",
              "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]
    with scripted_gateway(tmp_path, lines, renderer) as (url, gateway):
        async def session(i: int) -> None:
            messages: list = [{"role": "user", "content": f"Session {i}: read a.py."}]
            async with httpx.AsyncClient(base_url=url, timeout=60) as client:
                for t in range(turns):
                    r = await client.post("/v1/messages", headers={"x-api-key": f"s{i}"}, json={
                        "model": "m", "max_tokens": 64, "tools": tools, "messages": messages})
                    assert r.status_code == 200, r.text
                    content = r.json()["content"]
                    messages.append({"role": "assistant", "content": content})
                    result = f"session {i} turn {t}: " + "x = 1  # é 中文 🙂\n" * (OFF_LOOP_SUFFIX_CHARS // 10)
                    messages.append({"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": b["id"], "content": result}
                        for b in content if b["type"] == "tool_use"]})

        async def main() -> None:
            await asyncio.gather(*(session(i) for i in range(sessions)))

        asyncio.run(main())
        assert gateway._suffix_batcher is not None and gateway._suffix_batcher.items > 0
        for i in range(sessions):
            records = gateway.store.get(f"s{i}").turns
            assert len(records) == turns
            for record in records:
                assert record.parent == (record.index - 1 if record.index else None)
                assert record.prompt_ids.tolist() == renderer.render(record.messages, record.tools)


def test_a_request_alone_tokenizes_its_suffix_on_the_loop(tmp_path):
    """The thread hop gains nothing when no other request is being answered: a lone session's
    suffixes are tokenized right on the loop (the tokenizing thread is never started)."""
    renderer = qwen3_renderer()
    call = '<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}\n</tool_call>'
    tools = [{"name": "read_file", "description": "Read a file.",
              "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]
    with scripted_gateway(tmp_path, [{"text": call}] * 3, renderer) as (url, gateway), \
            httpx.Client(base_url=url, timeout=60) as client:
        messages: list = [{"role": "user", "content": "Read a.py."}]
        for t in range(3):
            r = client.post("/v1/messages", headers={"x-api-key": "alone"}, json={
                "model": "m", "max_tokens": 64, "tools": tools, "messages": messages})
            assert r.status_code == 200, r.text
            content = r.json()["content"]
            messages += [{"role": "assistant", "content": content}, {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": b["id"], "content": "x = 1\n" * 400}
                for b in content if b["type"] == "tool_use"]}]
        assert gateway._suffix_batcher is None
        records = gateway.store.get("alone").turns
        assert [r.parent for r in records] == [None, 0, 1]
        assert all(r.prompt_ids.tolist() == renderer.render(r.messages, r.tools) for r in records)
