import pytest

from pager import page, page_count


def test_exact_pages():
    assert page_count(20, 10) == 2


def test_no_items():
    assert page_count(0, 10) == 0


def test_partial_last_page_is_counted():
    assert page_count(25, 10) == 3


def test_last_page_holds_the_rest():
    assert page(list(range(25)), 3, 10) == [20, 21, 22, 23, 24]


def test_page_out_of_range():
    with pytest.raises(IndexError):
        page(list(range(20)), 3, 10)
