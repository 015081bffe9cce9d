from agent_code.agent.loop import DEFAULT_MAX_STEPS, Agent, AgentResult, run_agent
from agent_code.agent.prompt import system_prompt

__all__ = ["Agent", "AgentResult", "DEFAULT_MAX_STEPS", "run_agent", "system_prompt"]
