"""The HIP and MUSA plugins (plugins/hip, plugins/musa): built from the CUDA plugin's sources through
their vendor headers.

Here (no AMD or Moore Threads GPU): the vendor mapping is complete (scripts/check_vendor_mapping.py,
and that script does catch a gap), each built library exports one symbol, loads without crashing and
says why it is unavailable; the quirk bits each vendor header declares are read by compiling a small
program against it with the plugin's own compiler and flags (a device's props cannot be read without
a device). Where a device is present -- the shim-built MUSA plugin on an NVIDIA GPU -- the quirks are
read from the device props through pyggml and the scheduler's program shows them applied.
"""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLUGIN_DIR = os.path.join(ROOT, "pyggml", "plugins")
HIPCC = shutil.which("hipcc")
MCC = shutil.which("mcc")
NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
LIBS = {"hip": os.path.join(PLUGIN_DIR, "libpyggml-hip.so"), "musa": os.path.join(PLUGIN_DIR, "libpyggml-musa.so"),
        "hip-kernels": os.path.join(PLUGIN_DIR, "libpyghip-kernels.so")}
# the toolchain that builds each plugin here (hip.mk / musa.mk): without it the library is not expected
TOOL = {"hip": HIPCC, "musa": MCC or NVCC, "hip-kernels": HIPCC}
QUIRKS = 3  # PYG_QUIRK_NO_ASYNC_HOST_COPY | PYG_QUIRK_MULTI_DEVICE_SYNC
SCRIPT = os.path.join(ROOT, "scripts", "check_vendor_mapping.py")


def _need(name):
    if TOOL[name] is None:
        pytest.skip(f"no toolchain for the {name} plugin here (hipcc / mcc / nvcc)")
    if not os.path.exists(LIBS[name]):
        pytest.fail(f"{LIBS[name]} missing although {TOOL[name]} exists: run `make plugins`")
    return LIBS[name]


# ---------------------------------------------------------------- the mapping

def test_vendor_mapping_complete():
    r = subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "hip: plugins/hip/vendor_hip.h: complete" in r.stdout
    assert "musa: plugins/musa/vendor_musa.h: complete" in r.stdout
    for ident in ("cudaMalloc", "cudaStream_t", "__shfl_xor_sync", "__dp4a", "__CUDA_ARCH__"):
        assert ident in r.stdout, ident


def test_vendor_mapping_reports_gaps(tmp_path):
    """A vendor header with one mapping removed, a CUDA name leaked into it, and a kernel using an
    intrinsic no vendor header knows: the script fails and names each."""
    src = open(os.path.join(ROOT, "plugins", "hip", "vendor_hip.h")).read()
    assert "#define gpuMemset hipMemset\n" in src
    bad = src.replace("#define gpuMemset hipMemset\n", "").replace(
        "#define gpuFree hipFree", "#define gpuFree cudaFree")
    (tmp_path / "vendor_hip.h").write_text(bad)
    (tmp_path / "extra.cu").write_text("__global__ void k(unsigned *p) { p[0] = __ballot_sync(0xffffffffu, 1); }\n")
    r = subprocess.run([sys.executable, SCRIPT, "--vendor", f"hip={tmp_path / 'vendor_hip.h'}",
                        "--extra-source", str(tmp_path / "extra.cu")], capture_output=True, text=True)
    assert r.returncode == 1, r.stdout
    hip_part = r.stdout[r.stdout.index("hip: "):r.stdout.index("musa: ")]
    for ident in ("gpuMemset", "cudaMemset", "cudaFree", "__ballot_sync"):
        assert ident in hip_part, (ident, r.stdout)
    assert "__ballot_sync" in r.stdout[r.stdout.index("musa: "):]


def test_vendor_mapping_capability_blocks(tmp_path):
    """Code inside `#ifdef PYG_GPU_HAS_INT8_MMA` (or _WMMA, _PDL) is required only of vendors that
    define that capability: an intrinsic no vendor maps passes there, and fails outside it."""
    body = "__global__ void k(unsigned *p) { p[0] = __ballot_sync(0xffffffffu, 1); }\n"
    (tmp_path / "inside.cu").write_text("#ifdef PYG_GPU_HAS_INT8_MMA\n" + body + "#endif\n")
    r = subprocess.run([sys.executable, SCRIPT, "--extra-source", str(tmp_path / "inside.cu")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout
    (tmp_path / "outside.cu").write_text("#ifdef PYG_GPU_HAS_INT8_MMA\n#endif\n" + body)
    r = subprocess.run([sys.executable, SCRIPT, "--extra-source", str(tmp_path / "outside.cu")],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "__ballot_sync" in r.stdout, r.stdout


# ---------------------------------------------------------------- the libraries

@pytest.mark.parametrize("name", ["hip", "hip-kernels", "musa"])
def test_exports_one_symbol(name):
    lib = _need(name)
    out = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True, check=True).stdout
    assert [ln.split()[-1] for ln in out.splitlines() if ln.strip()] == ["pyg_plugin_get_api"], out


@pytest.mark.parametrize("name", ["hip", "hip-kernels", "musa"])
def test_runtime_linkage(name):
    """HIP: the plugin (loader.c) needs only libc; the kernels library it dlopens in plugin_init links
    libamdhip64 (hipcc's fat-binary registration needs it at load). Never the CUDA libraries. MUSA
    shim: cudart static, no driver library needed to load (as cuda)."""
    lib = _need(name)
    out = subprocess.run(["readelf", "-d", lib], capture_output=True, text=True, check=True).stdout
    needed = [ln.split("[")[-1].rstrip("]") for ln in out.splitlines() if "(NEEDED)" in ln]
    assert not any(n.startswith(("libcuda", "libcudart")) for n in needed), needed
    if name == "hip":
        assert needed == ["libc.so.6"], needed
    elif name == "hip-kernels":
        assert any(n.startswith("libamdhip64") for n in needed), needed
    elif MCC is None:
        assert not any("musa" in n for n in needed), needed


def test_hip_code_for_both_archs():
    """hip.mk's default HIP_ARCHS: the fat binary carries device code for gfx90a (wave64) and
    gfx1030 (wave32), one code object per source file with kernels."""
    lib = _need("hip-kernels")
    data = open(lib, "rb").read()
    for arch in (b"gfx90a", b"gfx1030"):
        n = data.count(b"amdgcn-amd-amdhsa--" + arch)
        assert n >= 6, (arch, n)


@pytest.mark.parametrize("name", ["hip", "musa"])
def test_loads_and_reports_unavailable_with_reason(name):
    """In a child process (a crash would not take pytest down): pyggml's loader loads the plugin;
    without a device of its kind it is unavailable, and the reason says why."""
    lib = _need(name)
    code = ("import pyggml as pg, sys\n"
            f"p = pg.load_plugin({lib!r})\n"
            "print('NAME', p.name); print('AVAILABLE', p.available); print('REASON', p.unavailable_reason)\n"
            "print('QUIRKS', [d.quirks for d in p.devices])\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = dict(ln.split(" ", 1) for ln in r.stdout.splitlines() if " " in ln)
    assert lines["NAME"] == name
    if lines["AVAILABLE"] == "True":
        assert lines["QUIRKS"] != "[]" and set(eval(lines["QUIRKS"])) == {QUIRKS}, lines
        return
    reason = lines["REASON"]
    assert reason.startswith(f"{name}: "), reason
    if name == "hip":
        assert "HIP" in reason and "hipGetDeviceCount" in reason, reason
    elif MCC is None:  # the shim build: CUDA's own reason, marked as the test build
        assert "musaGetDeviceCount" in reason and "test build" in reason, reason
    # the CLI lists it the same way
    r = subprocess.run([sys.executable, "-m", "pyggml", "devices"], capture_output=True, text=True, cwd=ROOT,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert any(ln.startswith(f"{name}:") for ln in r.stdout.splitlines()), r.stdout


def test_hip_loads_without_its_kernels_library(tmp_path):
    """The plugin alone (as on a machine without the HIP runtime, where the kernels library cannot
    load): it still loads, and plugin_init answers NO_DEVICE with the dynamic linker's reason."""
    lib = _need("hip")
    alone = tmp_path / "libpyggml-hip.so"
    shutil.copy(lib, alone)
    code = ("import pyggml as pg\n"
            f"p = pg.load_plugin({str(alone)!r})\n"
            "print(p.name, p.available); print(p.unavailable_reason)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    first, reason = r.stdout.splitlines()[:2]
    assert first == "hip False", r.stdout
    assert reason.startswith("hip: cannot load the HIP kernels library") and "libpyghip-kernels.so" in reason, reason


def _compile_probe(name, tmp_path):
    """Compile a host program against the vendor header exactly as hip.mk / musa.mk inject it and
    print what the plugin declares: name, quirk bits, logical warp size."""
    src = tmp_path / "probe.cpp"
    src.write_text('#include <stdio.h>\n#include "pyggml/plugin.h"\n#include "vendor.h"\n'
                   'int main(void) { printf("%s %llu %d\\n", PYG_GPU_PLUGIN_NAME, '
                   '(unsigned long long)(PYG_GPU_QUIRKS), PYG_WARP_SIZE); return 0; }\n')
    exe = tmp_path / "probe"
    inc = ["-I", os.path.join(ROOT, "include"), "-I", os.path.join(ROOT, "plugins", "cuda")]
    if name == "hip":
        if HIPCC is None:
            pytest.skip("hipcc not found")
        cmd = [HIPCC, "-x", "hip", "--cuda-host-only", "--offload-arch=gfx90a", "-DPYG_GPU_HIP", "-include",
               os.path.join(ROOT, "plugins", "hip", "vendor_hip.h")] + inc
        env = dict(os.environ, HIP_PLATFORM="amd")
    elif name == "musa":
        musa_h = os.path.join(ROOT, "plugins", "musa", "vendor_musa.h")
        if MCC is not None:
            cmd = [MCC, "-x", "musa", "-DPYG_GPU_MUSA", "-include", musa_h] + inc
        elif NVCC is not None:
            cmd = [NVCC, "-x", "cu", "-DPYG_GPU_MUSA", "-DPYG_MUSA_SHIM", "-include", musa_h, "-I",
                   os.path.join(ROOT, "plugins", "musa", "shim")] + inc
        else:
            pytest.skip("neither mcc nor nvcc")
        env = None
    else:
        if NVCC is None:
            pytest.skip("nvcc not found")
        cmd = [NVCC, "-x", "cu"] + inc
        env = None
    r = subprocess.run(cmd + ["-o", str(exe), str(src)], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    return subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()


@pytest.mark.slow
@pytest.mark.parametrize("name,quirks", [("hip", QUIRKS), ("musa", QUIRKS), ("cuda", 0)])
def test_declared_quirks(name, quirks, tmp_path):
    """The quirk bits device_get_props reports (plugin.cu: props.quirks = PYG_GPU_QUIRKS) per vendor
    header: HIP and MUSA declare both quirks, CUDA none. Where a device exists, the props test
    below reads them from the device itself."""
    plugin_name, q, warp = _compile_probe(name, tmp_path)
    assert plugin_name == name
    assert int(q) == quirks
    assert int(warp) == 32
    src = open(os.path.join(ROOT, "plugins", "cuda", "plugin.cu")).read()
    assert "p.quirks = PYG_GPU_QUIRKS;" in src


# ---------------------------------------------------------------- on a device (the H200: musa shim)

def _device(prefix):
    pg = pytest.importorskip("pyggml")
    for d in pg.devices():
        if str(d).startswith(prefix + ":"):
            return pg, str(d)
    pytest.skip(f"no {prefix} device here")


def test_musa_props_and_scheduler_quirks_on_device():
    """The shim-built MUSA plugin on an NVIDIA GPU: its device declares both quirks, so host copies
    are blocking and, with a second device (the CPU) in the run, every musa split is followed by a
    host sync; the same graph on cuda queues its host copies and has no quirk syncs. Results match."""
    pg, dev = _device("musa")
    d = next(x for x in pg.devices() if str(x) == dev)
    assert d.quirks == QUIRKS
    rng = np.random.default_rng(0)
    xv = rng.standard_normal((4, 64)).astype(np.float32)
    wv = rng.standard_normal((32, 64)).astype(np.float32)

    def build(gpu):
        g = pg.Graph()
        w = g.weight("w", wv)
        x = g.input("x", (4, 64), pg.f32)
        a = pg.rms_norm(x, eps=1e-5)
        b = pg.mul_mat(w, a)
        c = pg.silu(b)
        y = pg.scale(pg.mul(c, c), 0.5)
        for t, where in ((a, gpu), (b, gpu), (c, "cpu"), (y, gpu)):
            t.pin = where
        return y

    ref = pg.Scheduler(["cpu"]).compute(build("cpu"), {"x": xv})
    y = build(dev)
    s = pg.Scheduler([dev, "cpu"], sync="relaxed")
    out = s.compute(y, {"x": xv})
    assert np.allclose(out, ref, rtol=1e-4, atol=1e-5)
    text = s.program(y).text
    writes = [l for l in text if l.startswith("write")]
    assert writes and all("blocking" in l for l in writes), text
    assert any("quirk" in l for l in text), text
    musa_pattern = s.last_run.sync_pattern
    print("musa+cpu relaxed:", musa_pattern, "host syncs", s.last_run.host_syncs)
    try:
        _, cdev = _device("cuda")
    except pytest.skip.Exception:
        return
    yc = build(cdev)
    sc = pg.Scheduler([cdev, "cpu"], sync="relaxed")
    assert np.allclose(sc.compute(yc, {"x": xv}), ref, rtol=1e-4, atol=1e-5)
    ctext = sc.program(yc).text
    assert not any("quirk" in l for l in ctext), ctext
    assert any(l.startswith("write") and "async" in l for l in ctext), ctext
    print("cuda+cpu relaxed:", sc.last_run.sync_pattern, "host syncs", sc.last_run.host_syncs)
