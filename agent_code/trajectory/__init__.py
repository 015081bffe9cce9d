from agent_code.trajectory.records import TurnRecord

__all__ = ["TurnRecord"]
