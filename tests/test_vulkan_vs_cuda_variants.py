"""scripts/vulkan_vs_cuda.py --variants: named option sets, options written out, and what it says of a malformed one."""
import argparse

import pytest
from _scripts import load_script


@pytest.fixture(scope="module")
def vvc():
    return load_script("vulkan_vs_cuda")


def test_named_variant_is_kept(vvc):
    assert vvc._variant("new") == "new"
    assert vvc.VARIANTS["new"] == {}


def test_written_out_options_become_a_variant(vvc):
    assert vvc._variant("rp_rows=4,rp_lit=1") == "rp_rows=4,rp_lit=1"
    assert vvc.VARIANTS["rp_rows=4,rp_lit=1"] == {"rp_rows": "4", "rp_lit": "1"}


@pytest.mark.parametrize("bad, named", [("rp_rows=4,rp_lit", "'rp_lit'"), ("=1", "'=1'"), ("a=1,,b=2", "''")])
def test_malformed_options_are_named(vvc, bad, named):
    with pytest.raises(argparse.ArgumentTypeError, match=f"{named} is not key=value"):
        vvc._variant(bad)
    assert bad not in vvc.VARIANTS


def test_unknown_name_lists_the_known_ones(vvc):
    with pytest.raises(argparse.ArgumentTypeError, match="unknown variant 'bogus'.*new"):
        vvc._variant("bogus")


def test_every_variant_option_is_restored(vvc):
    """Each named variant sets only options DEFAULTS restores before the next variant, and a written-out option
    without a default is refused by name (the next variants would otherwise inherit it)."""
    for name, opts in vvc.VARIANTS.items():
        assert set(opts) - {"arena_lag"} <= set(vvc.DEFAULTS), (name, set(opts) - set(vvc.DEFAULTS))
    with pytest.raises(argparse.ArgumentTypeError, match="'no_such_option' has no default in DEFAULTS"):
        vvc._variant("no_such_option=1")
    assert vvc._variant("fa_cm_wgs=0,swiglu8=0") == "fa_cm_wgs=0,swiglu8=0"


def test_defaults_name_real_options(vvc):
    """Every DEFAULTS key is an option the Vulkan plugin knows (where it is loaded: setting each default must pass)."""
    import pyggml as pg
    dev = next((d for d in pg.devices() if d.plugin.name == "vulkan"), None)
    if dev is None:
        pytest.skip("no Vulkan device")
    for k, v in vvc.DEFAULTS.items():
        try:
            dev.set_option(k, v)
        except pg.UnsupportedError:   # (a value the device refuses, e.g. fa=coopmat on lavapipe: the key is known)
            pass
