from wordcount import longest_word, reading_time_minutes, word_count


def test_simple_sentence():
    assert word_count("the quick brown fox") == 4


def test_line_breaks_separate_words():
    assert word_count("first line\nsecond line") == 4


def test_tabs_separate_words():
    assert word_count("name\tage\tcity") == 3


def test_longest_word_across_lines():
    assert longest_word("a\nbb\nccc") == "ccc"


def test_reading_time():
    assert reading_time_minutes("word " * 400) == 2
