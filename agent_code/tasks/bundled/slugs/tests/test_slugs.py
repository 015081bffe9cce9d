from slugs import slugify, unique_slug


def test_punctuation_is_dropped():
    assert slugify("what's new?") == "what-s-new"


def test_slug_is_lowercase():
    assert slugify("Hello, World!") == "hello-world"


def test_unique_slug_is_lowercase():
    assert unique_slug("My First Post", set()) == "my-first-post"


def test_unique_slug_adds_a_number():
    assert unique_slug("news", {"news", "news-2"}) == "news-3"
