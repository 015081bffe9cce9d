"""Nothing heavy on the event loop: while one request's 10 MB body is parsed, translated,
rendered and tokenized (worker threads; the tokenizer lets go of the GIL), /healthz and a small
request of another session still answer at once."""

from __future__ import annotations

import json
import threading
import time

import httpx

from agent_code.render.template import LONG_TEXT, backend_encode
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
            r = httpx.post(f"{url}/v1/messages", content=big_body, headers={"x-api-key": "big"}, timeout=300)
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
                time.sleep(0.5)
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
