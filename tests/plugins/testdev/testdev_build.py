"""Build and query the GPU-like test plugin from Python (for pytest fixtures).

    spec = importlib.util.spec_from_file_location("testdev_build", ROOT + "/tests/plugins/testdev/testdev_build.py")
    tb = importlib.util.module_from_spec(spec); spec.loader.exec_module(tb)
    libdir = tb.build_testdev()                       # ROOT/build/testdev/libpyggml-testdev.so
    plugin = pyggml.load_plugin(libdir + "/libpyggml-testdev.so")
    dev = plugin.devices[0]; dev.set_option("sanitize", 1); dev.set_option("copy_latency_us", 2000)
    ...
    assert tb.sanitizer_report(dev) == ""

The build is incremental (make) in the git-ignored build/ folder and serialized with a file lock,
so test processes running at the same time do not write the same objects.
"""
import fcntl
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BUILD_SH = os.path.join(ROOT, "tests", "plugins", "testdev", "build.sh")


def build_testdev(out_dir=None, names=("testdev",)):
    """Build libpyggml-NAME.so for each name into out_dir (default ROOT/build/testdev); returns
    out_dir. Raises RuntimeError with the compiler's output when the build fails."""
    out_dir = os.path.abspath(out_dir or os.path.join(ROOT, "build", "testdev"))
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        r = subprocess.run([BUILD_SH, out_dir, *names], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"building the test plugin failed:\n{r.stdout}\n{r.stderr}")
    return out_dir


def sanitizer_report(device):
    """Violations the test plugin recorded since the last call (then forgotten), "" if none.
    `device` is a pyggml Device of the test plugin (any one: the report is per plugin)."""
    from pyggml import SanitizerError
    try:
        device.set_option("sanitize_check", "1")
    except SanitizerError as e:
        return str(e)
    return ""
