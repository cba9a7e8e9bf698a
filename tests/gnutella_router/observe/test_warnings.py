"""Rate-limited warnings: the first of a kind at once, the rest counted, never silent."""

from __future__ import annotations

from structlog.testing import capture_logs

from gnutella_router.logs import RateLimitedWarnings, get_logger


def test_one_line_per_key_per_interval_with_what_was_held_back() -> None:
    now = [0.0]
    with capture_logs() as logs:
        warnings = RateLimitedWarnings(get_logger("t"), interval=10.0, clock=lambda: now[0])
        assert warnings.warn("429", "peer refused", peer="a")
        assert not warnings.warn("429", "peer refused", peer="b")
        assert warnings.warn("503", "peer refused", peer="c")  # another key: its own line
        now[0] = 9.9
        assert not warnings.warn("429", "peer refused", peer="d")
        now[0] = 10.0
        assert warnings.warn("429", "peer refused", peer="e")
    assert [(entry["peer"], entry.get("suppressed")) for entry in logs] == [
        ("a", None),
        ("c", None),
        ("e", 2),
    ]


def test_the_table_of_keys_stays_bounded() -> None:
    warnings = RateLimitedWarnings(get_logger("t"), max_keys=8, clock=lambda: 0.0)
    with capture_logs():
        for index in range(100):
            warnings.warn(f"host {index}", "cannot dial")
    assert len(warnings._last) <= 8
