"""An answer is reused only for the very same reply bytes."""

from __future__ import annotations

from dracpu.api.reply_cache import ReplyCache


def _renderer(log: list[bytes]):  # type: ignore[no-untyped-def]
    def render(reply: bytes) -> bytes:
        log.append(reply)
        return reply.upper()

    return render


def test_same_reply_is_rendered_once_and_a_changed_one_again() -> None:
    cache, rendered = ReplyCache(), []
    render = _renderer(rendered)
    assert cache.render("", b"a", render) == b"A"
    assert cache.render("", b"a", render) == b"A"
    assert cache.render("", b"b", render) == b"B"
    assert cache.render("", b"a", render) == b"A"
    assert rendered == [b"a", b"b", b"a"]
    assert cache.hits == 1


def test_keys_are_independent_and_the_oldest_is_evicted() -> None:
    cache, rendered = ReplyCache(capacity=2), []
    render = _renderer(rendered)
    cache.render("ns-a", b"x", render)
    cache.render("ns-b", b"x", render)
    cache.render("ns-a", b"x", render)  # hit; ns-b is now the oldest
    cache.render("ns-c", b"x", render)  # evicts ns-b
    cache.render("ns-a", b"x", render)  # still there
    cache.render("ns-b", b"x", render)  # rendered again
    assert rendered == [b"x"] * 4
    assert cache.hits == 2
