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
