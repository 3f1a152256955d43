"""The plugins' log ring (pyggml/_plugin.pyx): a plugin's messages queue without the GIL and are emitted through the
'pyggml' logger by drain_log. A full ring loses messages; debug lines give way to more severe ones, so a plan's
hundreds of kernel-choice lines do not push out a pipeline's statistics or a warning (scripts/vulkan_pipeline_stats.py
lost every prefill pipeline's line to them on the H100)."""
import logging

import pytest

from pyggml import _plugin

RING = 128
DEBUG, INFO, WARN = 0, 1, 2


@pytest.fixture
def logged():
    _plugin.drain_log()
    records = []
    h = logging.Handler(level=logging.DEBUG)
    h.emit = lambda r: records.append((r.levelno, r.getMessage()))
    log = logging.getLogger("pyggml")
    old = log.level
    log.addHandler(h)
    log.setLevel(logging.DEBUG)
    try:
        yield records
    finally:
        log.removeHandler(h)
        log.setLevel(old)


def test_messages_come_out_in_order(logged):
    for i in range(5):
        _plugin._log_for_test(DEBUG if i % 2 else INFO, f"m{i}".encode())
    assert _plugin.drain_log() == 5
    assert logged == [(logging.INFO, "test: m0"), (logging.DEBUG, "test: m1"), (logging.INFO, "test: m2"),
                      (logging.DEBUG, "test: m3"), (logging.INFO, "test: m4")]


def test_a_full_ring_of_debug_lines_keeps_later_severe_ones(logged):
    for i in range(RING + 50):
        _plugin._log_for_test(DEBUG, f"d{i}".encode())
    _plugin._log_for_test(INFO, b"stats")
    _plugin._log_for_test(WARN, b"careful")
    assert _plugin.drain_log() == RING
    texts = [t for _, t in logged]
    # the oldest two debug lines made room for the severe ones; the 50 debug lines that found the ring full are lost
    assert texts[:RING - 2] == [f"test: d{i}" for i in range(2, RING)]
    assert texts[RING - 2:] == ["test: stats", "test: careful", "52 plugin log messages were dropped (ring full)"]
    assert logged[-1][0] == logging.WARNING


def test_a_full_ring_of_severe_lines_drops_the_new_one(logged):
    for i in range(RING):
        _plugin._log_for_test(WARN, f"w{i}".encode())
    _plugin._log_for_test(INFO, b"late")
    _plugin._log_for_test(DEBUG, b"later")
    assert _plugin.drain_log() == RING
    texts = [t for _, t in logged]
    assert texts[:RING] == [f"test: w{i}" for i in range(RING)]
    assert logged[-1] == (logging.WARNING, "2 plugin log messages were dropped (ring full)")
