"""Wire protocols, one module each, translating to and from the canonical turn format
(:mod:`agent_code.protocols.canonical`): :mod:`~agent_code.protocols.anthropic` (Messages),
:mod:`~agent_code.protocols.openai_chat` (Chat Completions) and
:mod:`~agent_code.protocols.openai_responses` (Responses), with the rules the two OpenAI
protocols share in :mod:`~agent_code.protocols.openai_common`. Pure functions only; the HTTP
side lives in :mod:`agent_code.gateway`.
"""
