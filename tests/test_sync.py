"""The sync state machine: every pair outside the table raises; the docs are generated from it."""
import os
import subprocess
import sys

import pytest

import pyggml as pg
from pyggml import sync

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAIRS = [(s, e) for s in sync.STATES for e in sync.EVENTS]


@pytest.mark.parametrize("state,event", PAIRS, ids=[f"{s}-{e}" for s, e in PAIRS])
def test_every_pair(state, event):
    if (state, event) in sync.TABLE:
        assert sync.transition(state, event) == sync.TABLE[(state, event)]
    else:
        with pytest.raises(pg.SyncStateError, match=f"{event} in state {state}"):
            sync.transition(state, event)


def test_unknown_names_raise():
    with pytest.raises(pg.SyncStateError):
        sync.transition("nowhere", "launch")
    with pytest.raises(pg.SyncStateError):
        sync.transition("free", "teleport")


def test_table_targets_are_states():
    assert all(v in sync.STATES for v in sync.TABLE.values())


def test_a_slot_cannot_be_overwritten_while_in_use():
    slot = sync.Slot("split 1 slot 0")
    for e in ("copy_async", "device_wait", "launch"):
        slot.fire(e)
    with pytest.raises(pg.SyncStateError, match="still read"):
        slot.fire("copy_async")
    slot.fire("record")
    slot.fire("device_wait")
    assert slot.fire("copy_async") == "filling"


def test_docs_match_the_table():
    with open(os.path.join(ROOT, "docs", "sync.md")) as f:
        assert f.read() == sync.markdown(), "docs/sync.md is stale: python -m pyggml.sync --markdown > docs/sync.md"
    out = subprocess.run([sys.executable, "-m", "pyggml.sync", "--markdown"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    assert out == sync.markdown()
