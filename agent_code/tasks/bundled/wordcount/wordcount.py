"""Word statistics for the essay editor's status bar."""


def words(text: str) -> list[str]:
    return text.split(" ")


def word_count(text: str) -> int:
    return len([w for w in words(text) if w])


def longest_word(text: str) -> str:
    return max(words(text), key=len, default="")


def reading_time_minutes(text: str, words_per_minute: int = 200) -> float:
    return word_count(text) / words_per_minute
