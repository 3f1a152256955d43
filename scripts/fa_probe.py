"""Time one flash_attn_ext node on cuda:0 (decode shapes) under torch.profiler."""
import sys, numpy as np, pyggml as pg
import torch
from torch.profiler import ProfilerActivity, profile
rng = np.random.default_rng(0)
for n_kv, filled, H, Hkv, D, use_mask in [(int(a), int(b), int(c), int(d), int(e), int(f)) for a, b, c, d, e, f in (x.split(',') for x in sys.argv[1:])] or [(512, 40, 32, 8, 64, 1), (512, 512, 32, 8, 64, 1), (512, 512, 32, 8, 64, 0), (4096, 4096, 32, 8, 128, 1)]:
    g = pg.Graph()
    q = g.input("q", (1, H, 1, D))
    k = g.weight("k", rng.standard_normal((1, Hkv, n_kv, D)).astype(np.float16))
    v = g.weight("v", rng.standard_normal((1, Hkv, n_kv, D)).astype(np.float16))
    m = np.full((1, 1, 1, n_kv), -np.inf, np.float16); m[..., :filled] = 0
    mk = g.weight("m", m) if use_mask else None
    with g.on("cuda:0"):
        o = pg.flash_attn_ext(q, k, v, mk, scale=0.125)
    s = pg.Scheduler(["cuda:0", "cpu"])
    feeds = {"q": rng.standard_normal((1, H, 1, D)).astype(np.float32)}
    for _ in range(3): s.compute(o, feeds)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(20): s.compute(o, feeds)
    for e in prof.key_averages():
        if "fattn" in e.key:
            print(n_kv, filled, H, Hkv, D, use_mask, e.key[:30], f"{e.device_time_total / e.count:.1f} us x{e.count}")
