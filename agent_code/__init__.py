"""agent-code: a hackable coding agent that speaks the Anthropic Messages protocol.

Kept import-light on purpose: ``agent-code --version`` must start fast, so the heavy
modules (the Anthropic SDK, rich) are imported only where they are used.
"""

__version__ = "0.1.0"
