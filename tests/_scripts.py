"""Loading a file of scripts/ as a module, for tests of its functions (the scripts are not a package)."""
import importlib.util
import os

SCRIPTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts")


def load_script(name):
    """scripts/<name>.py as a fresh module named <name>_under_test"""
    spec = importlib.util.spec_from_file_location(f"{name}_under_test", os.path.join(SCRIPTS, f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
