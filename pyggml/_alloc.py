"""Graph memory planning: lifetimes from the execution order, then offsets in one arena.

Measure first (this function only computes offsets), allocate once (the scheduler then makes one
buffer of `size` bytes). Tensors whose lifetimes do not overlap share bytes.
"""


def align_up(n, a):
    return (n + a - 1) // a * a


def plan_arena(sizes, first, last, alignment):
    """Offsets for tensors k with byte `sizes[k]`, alive from step first[k] to step last[k]
    (inclusive). Returns (offsets, arena_size). Best fit over a free list, processed in step order."""
    order = sorted(range(len(sizes)), key=lambda k: (first[k], k))
    ends = sorted(range(len(sizes)), key=lambda k: last[k])
    free = []          # (offset, size), sorted by offset
    top = 0
    offsets = [0] * len(sizes)
    e = 0
    for k in order:
        step = first[k]
        # release every tensor whose last use is before this step
        while e < len(ends) and last[ends[e]] < step:
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
