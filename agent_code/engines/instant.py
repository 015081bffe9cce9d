"""An engine that answers every request at once with the same short reply: no model, no script.

For load tests and overhead benchmarks, where the scripted engine's one-line-per-reply script
would have to hold thousands of lines. Specs:

* ``instant`` — a Hermes tool call, ``<tool_call>\\n{"name": "Read", "arguments": {"file_path":
  "/work/src/app.py"}}\\n</tool_call>`` (a Qwen-style template parses it as a call to ``Read``;
  a request that declares no such tool gets it back as ``ill_formed``);
* ``instant:TEXT`` — that text instead (``instant:Done.`` gives a plain text reply).

The reply is tokenized once, with the served tokenizer (special-token strings become their
tokens), and closed with the template's end-of-turn token. Logprobs are the scripted engine's
(the ``k``-th token gets ``-(k + 1) / 1024``). ``sampling.max_new_tokens`` cuts the reply
(finish ``"length"``) and ``sampling.stop`` strings end it (finish ``"stop"``), as in the
scripted engine. The prompt is not read; every request, of any session, gets the same reply.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any, Sequence

from agent_code.engines.base import Generation
from agent_code.engines.scripted import _stop_cut, default_logprob
from agent_code.protocols.canonical import SamplingParams

if TYPE_CHECKING:
    from agent_code.render.template import Renderer

DEFAULT_REPLY = ("<tool_call>\n" + json.dumps({"name": "Read", "arguments": {"file_path": "/work/src/app.py"}})
                 + "\n</tool_call>")


class InstantEngine:
    name = "instant"

    def __init__(self, renderer: Renderer, text: str | None = None) -> None:
        self.renderer = renderer
        self.text = DEFAULT_REPLY if not text else text
        self.ids = list(renderer.encode(self.text)) + list(renderer.end_of_turn_ids)
        self.logprobs = [default_logprob(k) for k in range(len(self.ids))]
        self.requests = 0

    async def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams, *,
                       session_id: str | None = None) -> Generation:
        self.requests += 1
        await asyncio.sleep(0)  # a cancellation point, like a real engine's await
        ids, logprobs, finish = self.ids, self.logprobs, "stop"
        meta: dict[str, Any] = {}
        cut = _stop_cut(self.renderer, ids, sampling.stop)
        if cut is not None:
            ids, logprobs, meta["stop"] = ids[:cut[0]], logprobs[:cut[0]], cut[1]
        if sampling.max_new_tokens is not None and len(ids) > sampling.max_new_tokens:
            end = max(0, sampling.max_new_tokens)
            ids, logprobs, finish = ids[:end], logprobs[:end], "length"
            meta.pop("stop", None)
        return Generation(output_ids=list(ids), logprobs=list(logprobs), finish_reason=finish,
                          prompt_tokens=len(prompt_ids), meta=meta)

    async def close(self) -> None:
        return None
