from inventory import Item, total_value


def test_total_value_counts_quantity():
    items = [Item("bolt", 0.5, 10), Item("nut", 0.25, 4)]
    assert total_value(items) == 6.0
