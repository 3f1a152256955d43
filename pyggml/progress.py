"""The one progress report of pyggml (model loads, synthetic model writes).

Functions that take `progress=` accept:
  True            a tqdm bar on stderr, shown only once the work has taken over DELAY_S seconds
  False / None    nothing
  a callable      called as fn(done, total, what) after each step (bytes done, bytes in all, the
                  name of the tensor just handled); replaces the bar, e.g. for a GUI or a log
"""
from __future__ import annotations

import sys
from typing import Callable, Optional, Union

ProgressFn = Callable[[int, int, str], None]
ProgressArg = Union[bool, None, ProgressFn]

DELAY_S = 1.0           # a bar appears only for work that lasts longer than this


class Progress:
    """A progress report over `total` bytes; see the module doc for `progress`."""

    def __init__(self, progress: ProgressArg, label: str, total: int):
        if progress is not None and not isinstance(progress, bool) and not callable(progress):
            raise TypeError(f"progress must be True, False, None or a callable(done, total, what), "
                            f"not {type(progress).__name__}")
        self.total = max(0, int(total))
        self._fn: Optional[ProgressFn] = progress if callable(progress) and not isinstance(progress, bool) else None
        self._bar = None
        self._done = 0
        if progress is True:
            from tqdm import tqdm
            tty = getattr(sys.stderr, "isatty", lambda: False)()
            self._bar = tqdm(total=self.total, desc=label, unit="B", unit_scale=True, unit_divisor=1000,
                             delay=DELAY_S, file=sys.stderr, leave=True, dynamic_ncols=True,
                             mininterval=0.2 if tty else 5.0)

    def update(self, done: int, what: str = "") -> None:
        """`done` bytes of `total` are finished (cumulative); `what` was the last item."""
        done = int(done)
        if self._fn is not None:
            self._fn(done, self.total, what)
        if self._bar is not None:
            if what:
                self._bar.set_postfix_str(what[:28], refresh=False)
            self._bar.update(done - self._done)
        self._done = done

    def __call__(self, done: int, total: int, what: str = "") -> None:
        """The callback form, fn(done, total, what), for writers that report their own total."""
        if int(total) != self.total:
            self.total = int(total)
            if self._bar is not None:
                self._bar.total = self.total
        self.update(done, what)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
