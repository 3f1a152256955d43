"""The synchronization contract, as data.

Every split of a graph reads its inputs from a *slot*: memory on the split's device that input
copies fill. The scheduler drives each (split, slot) through the state machine below while it
generates a run's command program; a transition that is not in the table raises SyncStateError,
so a program that launches before its inputs are ordered, or overwrites a slot that a launched
split may still read, is never executed. `python -m pyggml.sync --markdown` prints this module's
contract and table; docs/sync.md is generated from it (a test checks that they agree).
"""
import sys

from .errors import SyncStateError

CONTRACT = """\
## The contract

1. **Host waits** (`s`: the CPU blocks on a stream or an event) happen only where host memory is
   about to be reused or read: before host code (a CPU split, a blocking copy) touches memory that
   queued work may still read or write, before a slot or arena range that an async host copy still
   reads is overwritten, and once at the end of a run to read the outputs.
2. **Device waits** (`w`: a queue waits on an event of another queue of the same plugin) order
   everything else. Queues of different plugins can only be ordered through the host.
3. Every read of memory is ordered after the last write to it, and every write after the last reads
   and write, whichever queue (or the host) did them. The scheduler derives the waits from this rule
   by tracking, per byte range, the pending accesses of each queue; a policy only decides how an
   ordering is made:
   * `strict`: every queued copy and launch is followed by a host wait (the reference);
   * `relaxed`: queued copies, orderings made by host waits (one per split that needs one);
   * `events`: orderings made by device waits where both queues belong to one plugin that declares
     events; host waits only at plugin boundaries and for the outputs.
4. A split without inputs is still ordered after earlier work that touches memory it writes
   (the race where a split with no inputs overwrote host memory an async copy still read).
5. Same-plugin copies run on the *source* queue, so the producer's later work cannot overwrite the
   source before the copy; the destination waits on an event recorded after the copy.
6. Declared quirks: `PYG_QUIRK_NO_ASYNC_HOST_COPY` turns every copy from or to host memory into a
   blocking copy; `PYG_QUIRK_MULTI_DEVICE_SYNC` adds a host wait after each of the device's splits
   in runs that use more than one device. The scheduler never looks at plugin or vendor names.
7. Pipelining: split inputs have `n_copies` slots; micro-batch *m* uses slot *m* mod `n_copies`; a
   slot is refilled only after its last reader is ordered before the copy (rule 3). A plain
   `compute` always uses slot 0, so device graphs captured from it stay valid. In a pipelined run
   the user's arrays reach a device with queues through pinned host memory of its plugin (copied in
   before the run, out after it): a queued copy from or into ordinary host memory may block the
   host until its queue gets there (CUDA's does), which would hold every micro-batch behind the
   previous one's output.
8. Every run ends with the host waiting on each queue that has pending work and that no other such
   queue is ordered after (waiting for the last device of a chain covers the ones before it), so the
   next run starts with nothing in flight (its inputs can be overwritten, its program re-run
   unchanged).
9. A blocking copy (`c`) is complete, for every queue of its device, when it returns: the plugin
   makes it so (plugin.h). The CUDA runtime's plain copy from pageable memory returns before its
   bytes land, on a default queue the plugin's streams do not wait for; the CUDA plugin waits for
   it (the strict race seen on the H200), and the test plugin models both (tests/plugins/testdev).
"""

STATES = ("free", "filling", "filled", "launched", "recorded")
STATE_DOC = {
    "free": "nothing pending on the slot that the split's queue is not ordered after",
    "filling": "input copies are queued; the split's queue is not yet ordered after all of them",
    "filled": "every input copy is complete or ordered before the split's queue",
    "launched": "the split is queued and may still read the slot",
    "recorded": "an event marks the end of the split's reads",
}

EVENTS = ("copy_async", "copy_blocking", "host_sync", "device_wait", "launch", "record")
EVENT_DOC = {
    "copy_async": "a queued copy into the slot (`a`)",
    "copy_blocking": "a copy into the slot that is complete when it returns (`c`)",
    "host_sync": "the host waited for the slot's writers or readers (`s`)",
    "device_wait": "the consuming queue (or the next writer's queue) waited on their event (`w`), or "
                   "the copies were queued on the consuming queue itself, which runs in order",
    "launch": "the split's graph is queued (`g`)",
    "record": "an event is recorded after the split",
}

# (state, event) -> new state. Anything absent is illegal.
TABLE = {
    ("free", "copy_async"): "filling",
    ("free", "copy_blocking"): "filled",
    ("free", "host_sync"): "free",
    ("free", "device_wait"): "free",
    ("free", "launch"): "launched",          # a split without inputs (rule 4 orders it)
    ("filling", "copy_async"): "filling",
    ("filling", "copy_blocking"): "filling",
    ("filling", "host_sync"): "filled",
    ("filling", "device_wait"): "filled",
    ("filled", "copy_async"): "filling",
    ("filled", "copy_blocking"): "filled",
    ("filled", "host_sync"): "filled",
    ("filled", "device_wait"): "filled",
    ("filled", "launch"): "launched",
    ("launched", "record"): "recorded",
    ("launched", "host_sync"): "free",
    ("recorded", "host_sync"): "free",
    ("recorded", "device_wait"): "free",
}

WHY_ILLEGAL = {
    "launch": {"filling": "launch before the split's input copies are ordered before its queue",
               "launched": "launch of a slot whose previous launch may still be reading it",
               "recorded": "launch of a slot whose previous launch may still be reading it"},
    "copy_async": {"launched": "overwriting an input slot a launched split may still read",
                   "recorded": "overwriting an input slot before its reader's event was waited on"},
    "copy_blocking": {"launched": "overwriting an input slot a launched split may still read",
                      "recorded": "overwriting an input slot before its reader's event was waited on"},
    "record": {s: "an event records the end of a launch; none is queued" for s in ("free", "filling", "filled")},
    "device_wait": {"launched": "a device wait needs an event recorded after the launch"},
}


def transition(state, event, where=""):
    """The one function that changes a slot's state. Raises SyncStateError on an illegal pair."""
    if state not in STATES:
        raise SyncStateError(f"unknown sync state {state!r}")
    if event not in EVENTS:
        raise SyncStateError(f"unknown sync event {event!r}")
    new = TABLE.get((state, event))
    if new is None:
        why = WHY_ILLEGAL.get(event, {}).get(state, "not allowed by the contract")
        loc = f" ({where})" if where else ""
        raise SyncStateError(f"illegal sync transition: {event} in state {state}{loc}: {why}")
    return new


class Slot:
    """A (split, slot) pair's state, changed only through transition()."""

    __slots__ = ("state", "name", "history")

    def __init__(self, name):
        self.name = name
        self.state = "free"
        self.history = []

    def fire(self, event):
        self.state = transition(self.state, event, self.name)
        self.history.append(event)
        return self.state


def markdown():
    """The contract and the transition table as Markdown (docs/sync.md is this text)."""
    out = ["# Synchronization in pyggml", "",
           "Generated by `python -m pyggml.sync --markdown` from `pyggml/sync.py`; do not edit.", "",
           CONTRACT, "## States of a split's input slot", ""]
    out += [f"- `{s}`: {STATE_DOC[s]}" for s in STATES]
    out += ["", "## Events", ""]
    out += [f"- `{e}`: {EVENT_DOC[e]}" for e in EVENTS]
    out += ["", "## Transitions", "", "| state \\ event | " + " | ".join(f"`{e}`" for e in EVENTS) + " |",
            "|---|" + "---|" * len(EVENTS)]
    for s in STATES:
        cells = []
        for e in EVENTS:
            n = TABLE.get((s, e))
            cells.append(f"`{n}`" if n else "illegal")
        out.append(f"| `{s}` | " + " | ".join(cells) + " |")
    out += ["", "## Sync pattern letters", "",
            "`c` blocking copy, `a` queued copy, `g` graph launch, `w` device wait, `s` host wait.", ""]
    return "\n".join(out)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--markdown"]:
        sys.stdout.write(markdown())
        return 0
    print("usage: python -m pyggml.sync --markdown", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
