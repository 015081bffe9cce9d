from inventory.stock import Item, total_value

__all__ = ["Item", "total_value"]
