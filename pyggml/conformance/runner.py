"""Runs conformance cases on a device and reports pass / fail / unsupported."""
import math

import numpy as np

import pyggml as pg
from .cases import CASES, nmse


def run_case(case, sched, seed):
    """Returns (status, detail): status is 'pass', 'fail' or 'unsupported'."""
    rng = np.random.default_rng(seed)
    outs, feeds, refs = case.build(rng)
    try:
        got = sched.compute(outs, feeds)
    except pg.UnsupportedError as e:
        return "unsupported", str(e)
    worst = 0.0
    for o, r in zip(got, refs):
        if case.exact:
            if not np.array_equal(np.asarray(o), np.asarray(r)):
                return "fail", f"not equal: {np.asarray(o)!r} vs {np.asarray(r)!r}"
            continue
        e = nmse(o, r)
        worst = max(worst, e)
        if not e <= case.thr:
            return "fail", f"NMSE {e:.3g} > {case.thr:g}" + (" (non-finite output)" if math.isinf(e) else "")
    return "pass", f"NMSE {worst:.3g}"


def run_all(device, seed=0, cases=None, echo=print):
    """Run every case on `device` with poisoned outputs; returns {status: count}."""
    sched = pg.Scheduler([device], poison=True)
    counts = {"pass": 0, "fail": 0, "unsupported": 0}
    for i, c in enumerate(cases or CASES):
        try:
            status, detail = run_case(c, sched, seed + i)
        except pg.PyggmlError as e:
            status, detail = "fail", f"{type(e).__name__}: {e}"
        counts[status] += 1
        if echo:
            echo(f"{status:11s} {c.name:40s} {detail}")
    return counts
