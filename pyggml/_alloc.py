"""Graph memory planning: lifetimes from the execution order, then offsets in one arena.

Measure first (this function only computes offsets), allocate once (the scheduler then makes one
buffer of `size` bytes). Tensors whose lifetimes do not overlap share bytes.
"""


REUSE_LAG = 5   # steps: what a device that may run neighbouring nodes together gets (_plan.build_plan)
SMALL_BYTES = 256 << 10   # a tensor up to this size (a decode step's activations: one row) ...
SMALL_LAG = 12            # ... keeps its bytes this many steps on such a device (plan_arena)


def align_up(n, a):
    return (n + a - 1) // a * a


def plan_arena(sizes, first, last, alignment, lag=0, small_lag=None):
    """Offsets for tensors k with byte `sizes[k]`, alive from step first[k] to step last[k]
    (inclusive). Returns (offsets, arena_size). Best fit over a free list, processed in step order.

    A tensor's bytes are reused only from step last[k] + lag + 1 on: reusing them at the very next
    step would make that step's node overwrite what the step before still reads, a dependency the
    nodes do not have, and a device that runs independent nodes between the same two barriers
    (the Vulkan plugin) would have to put a barrier there. A small lag keeps neighbouring
    independent nodes (a layer's q/k/v ropes and cache writes) apart in memory for a few more
    bytes of arena; lag 0 is the tightest packing. The scheduler asks REUSE_LAG of devices that
    are not the host CPU (which runs one node after another anyway). Five steps also keep a
    layer norm's inputs intact while the q/k/v (or gate/up) mat-vecs that follow it run, which
    the Vulkan plugin's mul_mat_vec3n reads to recompute the norm beside its dispatch (it checks
    and falls back where they were reused). Cost: a synthetic 2-layer LLaMA's 256-token prefill
    arena 3.0 MB at lag 2, 3.5 MB at 5 (2.5 MB at 0); decode arenas are a few KiB.

    small_lag (default: lag), for tensors of at most SMALL_BYTES: the Vulkan plugin's repacked decode
    mat-vecs that recompute a layer norm (option rp_norm_in) read its inputs while the same dispatch
    writes the q/k/v ropes and cache rows, which come up to 10 steps after the norm's add in a LLaMA
    layer; decode-sized tensors kept apart that long cost a few KiB, prefill-sized ones keep `lag`."""
    small_lag = lag if small_lag is None else small_lag
    lag_of = [small_lag if s <= SMALL_BYTES else lag for s in sizes]
    order = sorted(range(len(sizes)), key=lambda k: (first[k], k))
    ends = sorted(range(len(sizes)), key=lambda k: last[k] + lag_of[k])
    free = []          # (offset, size), sorted by offset
    top = 0
    offsets = [0] * len(sizes)
    e = 0
    for k in order:
        step = first[k]
        # release every tensor whose last use is before this step
        while e < len(ends) and last[ends[e]] + lag_of[ends[e]] < step:
            j = ends[e]
            e += 1
            _release(free, offsets[j], align_up(max(sizes[j], 1), alignment))
        need = align_up(max(sizes[k], 1), alignment)
        best = None
        for i, (off, sz) in enumerate(free):
            if sz >= need and (best is None or sz < free[best][1]):
                best = i
        if best is None:
            # grow the arena, reusing a free block that ends at the top
            if free and free[-1][0] + free[-1][1] == top:
                off, sz = free.pop()
                top = off
            offsets[k] = top
            top += need
        else:
            off, sz = free[best]
            offsets[k] = off
            if sz == need:
                free.pop(best)
            else:
                free[best] = (off + need, sz - need)
    return offsets, top


def _release(free, off, size):
    # insert and merge neighbours
    i = 0
    while i < len(free) and free[i][0] < off:
        i += 1
    free.insert(i, (off, size))
    if i + 1 < len(free) and free[i][0] + free[i][1] == free[i + 1][0]:
        free[i] = (free[i][0], free[i][1] + free[i + 1][1])
        free.pop(i + 1)
    if i > 0 and free[i - 1][0] + free[i - 1][1] == free[i][0]:
        free[i - 1] = (free[i - 1][0], free[i - 1][1] + free[i][1])
        free.pop(i)
