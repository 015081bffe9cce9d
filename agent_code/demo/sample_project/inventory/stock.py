from dataclasses import dataclass


@dataclass
class Item:
    name: str
    price: float
    quantity: int


def total_value(items: list[Item]) -> float:
    """Value of everything in stock."""
    return sum(item.price for item in items)
