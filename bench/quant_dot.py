"""Single-threaded quantized mat-vec / mat-mat throughput of the CPU plugin's dot kernels.

Weights W [M, K] of each type, activations quantized to the type's vec_dot_type; reports the
weight bytes streamed per second (mat-vec, the decode case) and, for ny activation rows through
the multi-row kernel, the effective GB/s (weight bytes / time) as well. Default: the
4096 x 14336 matrix of a LLaMA-3-8B FFN (K = 4096, M = 14336).

    python3 bench/quant_dot.py [--K 4096] [--M 14336] [--ny 4] [--reps 5] [--json out.json]
"""
import argparse
import ctypes
import json
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "quants"))
import qlib  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--K", type=int, default=4096)
    ap.add_argument("--M", type=int, default=14336)
    ap.add_argument("--ny", type=int, default=4)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--types", default="q4_0,q8_0,q4_K,q6_K")
    ap.add_argument("--json")
    ap.add_argument("--cpu-time", action="store_true", help="time by process CPU time (busy machine)")
    ap.add_argument("--peer", default=os.path.join(qlib.HERE, "build", "libggml_peer.so"),
                    help="ggml's AVX2 dot products (tests/quants/build_oracle.sh builds them); "
                         "timed side by side when the file exists")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        q = qlib.QLib(qlib.build(d))
        lib = q.lib
        P = ctypes.c_void_p
        lib.tq_mat_mul.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, P, P, P,
                                   ctypes.c_longlong, ctypes.c_int]
        peer = ctypes.CDLL(a.peer) if a.peer and os.path.exists(a.peer) else None
        lib.tq_mat_vec_ggml.argtypes = [P, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_longlong, P, P, P]
        rng = np.random.default_rng(0)
        results = []
        lib.tq_read_stream.argtypes = [P, ctypes.c_longlong]
        lib.tq_read_stream.restype = ctypes.c_longlong
        buf = np.ones(64 << 20, np.uint8)
        tt = []
        for _ in range(a.reps + 1):
            t0, c0 = time.perf_counter(), time.process_time()
            lib.tq_read_stream(buf.ctypes.data_as(P), buf.nbytes)
            tt.append((time.process_time() - c0) if a.cpu_time else (time.perf_counter() - t0))
        read_gbps = round(buf.nbytes / min(tt[1:]) / 1e9, 2)
        del buf
        print(f"K={a.K} M={a.M} single thread, avx2={q.has_avx2()}, plain 64 MB read {read_gbps} GB/s")
        for name in a.types.split(","):
            vt = qlib.VEC_DOT_TYPE[name]
            # quantize a small random tile and repeat it (quantizing 58M values takes a while)
            tile = q.quantize(name, rng.standard_normal((64, a.K)).astype(np.float32))
            W = np.ascontiguousarray(np.tile(tile, (a.M // 64 + 1, 1))[:a.M])
            y = q.quantize(vt, rng.standard_normal((a.ny, a.K)).astype(np.float32))
            ref_out = np.empty((a.M, a.ny), np.float32)
            row = {"type": name, "weight_bytes": int(W.nbytes)}
            for label, which, ny in (("matvec", 0, 1), ("matvec_ref", 1, 1), (f"matmat{a.ny}", 2, a.ny)):
                out = np.empty((a.M, ny), np.float32)
                reps = 1 if which == 1 else a.reps
                times, cpu = [], []
                for _ in range(reps + 1):
                    t0, c0 = time.perf_counter(), time.process_time()
                    lib.tq_mat_mul(qlib.TYPES[name][0], which, a.K, a.M, out.ctypes.data_as(P),
                                   W.ctypes.data_as(P), y.ctypes.data_as(P), y.shape[1], ny)
                    times.append(time.perf_counter() - t0)
                    cpu.append(time.process_time() - c0)
                # wall time, unless the machine is shared and the process lost its core: then
                # the CPU time it actually got (both recorded)
                row[label + "_wall_ms"] = round(float(np.min(times[1:])) * 1e3, 3)
                t = float(np.min(cpu[1:])) if a.cpu_time else float(np.min(times[1:]))
                if which == 2:
                    lib.tq_mat_mul(qlib.TYPES[name][0], 0, a.K, a.M, ref_out.ctypes.data_as(P),
                                   W.ctypes.data_as(P), y.ctypes.data_as(P), y.shape[1], a.ny)
                    assert np.allclose(out, ref_out, rtol=1e-4, atol=1e-3)
                row[label + "_ms"] = round(t * 1e3, 3)
                row[label + "_GBps"] = round(W.nbytes / t / 1e9, 2)
            if peer is not None:
                fn = ctypes.cast(getattr(peer, f"ggml_vec_dot_{name}_{vt}"), P)
                out = np.empty(a.M, np.float32)
                times = []
                for _ in range(a.reps + 1):
                    t0, c0 = time.perf_counter(), time.process_time()
                    lib.tq_mat_vec_ggml(fn, a.K, a.M, W.shape[1], out.ctypes.data_as(P), W.ctypes.data_as(P),
                                        y.ctypes.data_as(P))
                    times.append((time.process_time() - c0) if a.cpu_time else (time.perf_counter() - t0))
                ours = np.empty(a.M, np.float32)
                lib.tq_mat_mul(qlib.TYPES[name][0], 0, a.K, a.M, ours.ctypes.data_as(P),
                               W.ctypes.data_as(P), y.ctypes.data_as(P), y.shape[1], 1)
                assert np.allclose(out, ours, rtol=1e-4, atol=1e-3), "peer disagrees"
                row["ggml_matvec_GBps"] = round(W.nbytes / min(times[1:]) / 1e9, 2)
            results.append(row)
            print(f"{name:5s} {W.nbytes / 1e6:7.1f} MB  mat-vec {row['matvec_ms']:7.2f} ms "
                  f"{row['matvec_GBps']:6.2f} GB/s | scalar {row['matvec_ref_GBps']:6.2f} GB/s | "
                  f"{a.ny} rows multi {row[f'matmat{a.ny}_ms']:7.2f} ms ({row[f'matmat{a.ny}_GBps']:6.2f} GB/s of weights, "
                  f"{row[f'matmat{a.ny}_GBps'] * a.ny:6.2f} row-GB/s)"
                  + (f" | ggml mat-vec {row['ggml_matvec_GBps']:6.2f} GB/s" if peer is not None else ""))
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"K": a.K, "M": a.M, "ny": a.ny, "read_GBps": read_gbps, "cpu_time": a.cpu_time,
                       "load_avg": os.getloadavg(), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
