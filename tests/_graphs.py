"""Graph generators shared by the multi-device tests (test_multi.py on the test plugin,
test_vulkan_multi.py on cpu + vulkan): node placement comes from `with g.on(dev):` pins."""
import random

import numpy as np

import pyggml as pg


def random_graph(seed, devset):
    rng = np.random.default_rng(seed)
    pick = random.Random(seed)
    g = pg.Graph()
    K = 24
    x = g.input("x", (5, K))
    kv = g.state("kv", (8, K))
    live = [x]
    for step in range(12):
        with g.on(pick.choice(devset)):
            a = pick.choice(live)
            op = pick.choice(["add", "mul", "scale", "silu", "rms_norm", "mul_mat", "soft_max", "set_rows", "gelu"])
            if op in ("add", "mul"):
                b = pick.choice(live)
                t = pg.add(a, b) if op == "add" else pg.mul(a, b)
            elif op == "scale":
                t = pg.scale(a, 0.5 + pick.random())
            elif op == "silu":
                t = pg.silu(a)
            elif op == "gelu":
                t = pg.gelu(a)
            elif op == "rms_norm":
                t = pg.rms_norm(a, eps=1e-5)
            elif op == "soft_max":
                t = pg.soft_max(a, scale=0.3)
            elif op == "mul_mat":
                w = g.weight(f"w{step}", (rng.standard_normal((K, K)) * 0.2).astype(np.float32))
                t = pg.mul_mat(w, a)
            else:
                idx = g.input(f"i{step}", (5,), pg.i32)
                pg.set_rows(kv, a, idx)
                t = pg.get_rows(kv, idx)
            live.append(t)
    out = pg.add(live[-1], pg.rms_norm(live[len(live) // 2], eps=1e-5))
    feeds = {t.name: (rng.standard_normal(t.shape).astype(np.float32) if t.type == pg.f32 else
                      rng.choice(8, 5, replace=False).astype(np.int32)) for t in g.inputs}
    return out, kv, feeds


def chain(devices):
    """x -> (dev A) rms_norm, mul_mat -> (dev B) mul_mat, silu."""
    rng = np.random.default_rng(7)
    g = pg.Graph()
    x = g.input("x", (4, 32))
    w1 = g.weight("w1", rng.standard_normal((32, 32)).astype(np.float32))
    w2 = g.weight("w2", rng.standard_normal((32, 32)).astype(np.float32))
    with g.on(devices[0]):
        h = pg.mul_mat(w1, pg.rms_norm(x, eps=1e-5))
    with g.on(devices[-1]):
        y = pg.silu(pg.mul_mat(w2, h))
    return y, {"x": rng.standard_normal((4, 32)).astype(np.float32)}
