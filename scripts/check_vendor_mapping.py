#!/usr/bin/env python3
"""Checks that the HIP and MUSA vendor headers map everything CUDA-specific the CUDA plugin uses.

It lists every CUDA runtime / library / device identifier in plugins/cuda/*.cu, *.cuh, *.h
(comments and string literals stripped): cuda*, cublas*, CUDA*, __intrinsics (__shfl_xor_sync,
__dp4a, __half ...), nvcuda / wmma::*, CUDA's vector types (float4 ...) and __CUDA_ARCH__. Then,
for each vendor header (plugins/hip/vendor_hip.h, plugins/musa/vendor_musa.h):

  * an identifier used by CUDA's own mapping (the CUDA branch of plugins/cuda/vendor.h) is mapped
    when the vendor header defines every gpu*/PYG_* name whose CUDA definition uses it;
  * an identifier the kernels use directly is mapped when the vendor header #defines it or lists it
    on a `PYG_NATIVE:` line (its toolchain provides it with CUDA's meaning; the compile checks that);
  * code inside `#ifdef PYG_GPU_HAS_WMMA` (or another capability macro: PYG_GPU_HAS_CUBLAS,
    PYG_GPU_HAS_INT8_MMA, PYG_GPU_HAS_PDL) counts only for vendors that define that macro.

It also fails when a vendor header itself names a cuda*/cublas* identifier (a leak that would only
build on NVIDIA). Exit 0 when both headers are complete, 1 (listing what is unmapped) otherwise.
    python3 scripts/check_vendor_mapping.py [-v] [--vendor NAME=HEADER ...] [--extra-source FILE ...]
(--vendor replaces a vendor header, --extra-source scans one more file as if it were under
plugins/cuda: both are for tests of this script.)
"""
import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CUDA_DIR = os.path.join(ROOT, "plugins", "cuda")
VENDORS = {"hip": os.path.join(ROOT, "plugins", "hip", "vendor_hip.h"),
           "musa": os.path.join(ROOT, "plugins", "musa", "vendor_musa.h")}

# What counts as CUDA-specific.
CUDA_ID = re.compile(r"\b(?:cuda[A-Z]\w*|cublas\w*|CUDA[A-Z_]\w*|__CUDA_ARCH__|__[a-z]\w*|nvcuda|wmma::\w+|"
                     r"__nv_\w+|(?:float|int|uint|half|char|uchar|short|ushort|double)[1-4])\b")
# Portable compiler words that are not CUDA's (gcc/clang builtins and attributes).
NOT_CUDA = {"__attribute__", "__restrict__", "__builtin_expect", "__func__", "__VA_ARGS__", "__cplusplus"}
IDENT = re.compile(r"\b[A-Za-z_]\w*\b")


def strip(text):
    """Remove comments and string/char literals (keep newlines, so line numbers stay)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def drop_includes(text):
    return "\n".join("" if ln.lstrip().startswith("#include") else ln for ln in text.split("\n"))


CAPS = ("PYG_GPU_HAS_WMMA", "PYG_GPU_HAS_CUBLAS", "PYG_GPU_HAS_INT8_MMA", "PYG_GPU_HAS_PDL")  # optional capabilities


def split_caps(text):
    """(code outside `#ifdef CAP` blocks, {cap: code inside its blocks}) for the CAPS macros; the
    innermost capability block owns a line. Handles nesting and #else."""
    outside, inside = [], {c: [] for c in CAPS}
    stack = []  # per open #if: a cap name, "else" (a cap's #else branch) or "other"

    def owner(frames):
        for f in reversed(frames):
            if f in CAPS:
                return f
        return None
    for ln in text.split("\n"):
        s = ln.strip()
        m = re.match(r"#\s*(ifdef|ifndef|if|elif|else|endif)\b(.*)", s)
        if m:
            kw, rest = m.group(1), m.group(2)
            if kw in ("ifdef", "if", "ifndef"):
                stack.append(rest.strip() if kw == "ifdef" and rest.strip() in CAPS else "other")
            elif kw == "else" and stack and stack[-1] in CAPS:
                stack[-1] = "else"
            elif kw == "endif" and stack:
                stack.pop()
            if kw in ("ifdef", "ifndef", "if", "elif"):  # the tested macros count as uses too
                o = owner(stack[:-1])
                (inside[o] if o else outside).append(rest)
            continue
        o = owner(stack)
        (inside[o] if o else outside).append(ln)
    return "\n".join(outside), {c: "\n".join(v) for c, v in inside.items()}


def cuda_branch_of_vendor_h(text):
    """The CUDA mapping: the part of plugins/cuda/vendor.h inside `#ifndef PYG_GPU_PLUGIN_NAME`."""
    m = re.search(r"#\s*ifndef\s+PYG_GPU_PLUGIN_NAME\b(.*)#\s*endif\s*/\*\s*no derived build", text, re.S)
    return m.group(1) if m else text


def definitions(text):
    """{name: body} of #define and typedef lines (bodies may continue with backslashes)."""
    defs = {}
    text = text.replace("\\\n", " ")
    for ln in text.split("\n"):
        m = re.match(r"\s*#\s*define\s+(\w+)(\([^)]*\))?\s*(.*)", ln)
        if m:
            defs[m.group(1)] = m.group(3)
            continue
        m = re.match(r"\s*typedef\s+(.*?)\b(\w+)\s*;", ln)
        if m:
            defs[m.group(2)] = m.group(1)
    return defs


def cuda_ids(code):
    return {m.group(0) for m in CUDA_ID.finditer(code)} - NOT_CUDA


def scan_sources(extra=()):
    """uses[id] = set of 'file:line'; via_map[id] = gpu*/PYG_* names in vendor.h defined with it;
    cap_only[cap] = ids used only inside that capability's blocks; required = names vendor.h defines."""
    uses, direct, cap_ids = {}, set(), {c: set() for c in CAPS}
    vendor_text = open(os.path.join(CUDA_DIR, "vendor.h")).read()
    cuda_map = definitions(strip(cuda_branch_of_vendor_h(vendor_text)))
    cuda_map.pop("PYG_CUDA_VENDOR_H", None)
    via_map = {}
    for name, body in cuda_map.items():
        for ident in cuda_ids(body):
            via_map.setdefault(ident, set()).add(name)
    files = sorted(glob.glob(os.path.join(CUDA_DIR, "*.cu")) + glob.glob(os.path.join(CUDA_DIR, "*.cuh")) +
                   glob.glob(os.path.join(CUDA_DIR, "*.h"))) + list(extra)
    for path in files:
        rel = os.path.relpath(path, ROOT)
        text = open(path).read()
        if os.path.basename(path) == "vendor.h":
            continue  # its identifiers are the mapping itself (via_map)
        code = drop_includes(strip(text))
        outside, inside = split_caps(code)
        for part, cap in [(outside, None)] + [(inside[c], c) for c in CAPS]:
            for lineno, ln in enumerate(part.split("\n"), 1):
                for ident in cuda_ids(ln):
                    uses.setdefault(ident, set()).add(f"{rel}")
                    (cap_ids[cap] if cap else direct).add(ident)
    for ident, names in via_map.items():
        uses.setdefault(ident, set()).add("plugins/cuda/vendor.h (" + ", ".join(sorted(names)) + ")")
    cap_only = {c: ids - direct for c, ids in cap_ids.items()}
    return uses, via_map, direct.union(*cap_ids.values()), cap_only, set(cuda_map)


def check_vendor(name, path, uses, via_map, direct, cap_only, required):
    text = open(path).read()
    code = strip(text)
    defs = definitions(code)
    native = set()
    for m in re.finditer(r"PYG_NATIVE:(.*)", text):
        native.update(m.group(1).split())
    has_wmma = "PYG_GPU_HAS_WMMA" in defs
    missing = []
    for gpu_name in sorted(required):
        if gpu_name in CAPS:
            continue  # optional: without one the sources compile that capability's code out
        if gpu_name not in defs:
            missing.append((gpu_name, "not defined (CUDA's vendor.h defines it)"))
    for ident in sorted(uses):
        if ident in via_map:
            lacking = sorted(n for n in via_map[ident] if n not in defs and n not in CAPS)
            if lacking:
                missing.append((ident, "its gpu names " + ", ".join(lacking) + " are not defined"))
        if ident in direct:
            caps = [c for c in CAPS if ident in cap_only[c]]
            if caps and not any(c in defs for c in caps):
                continue
            if ident not in defs and ident not in native:
                missing.append((ident, "used by " + ", ".join(sorted(u for u in uses[ident] if "vendor.h" not in u))))
    leaks = sorted({m.group(0) for m in re.finditer(r"\b(?:cuda[A-Z]\w*|cublas\w*|nvcuda)\b", drop_includes(code))})
    for leak in leaks:
        missing.append((leak, "a CUDA name inside the vendor header"))
    return missing, has_wmma


def main():
    args = sys.argv[1:]
    verbose = "-v" in args
    extra = []
    for i, a in enumerate(args):
        if a == "--vendor" and i + 1 < len(args):
            name, _, path = args[i + 1].partition("=")
            VENDORS[name] = os.path.abspath(path)
        elif a == "--extra-source" and i + 1 < len(args):
            extra.append(os.path.abspath(args[i + 1]))
    uses, via_map, direct, cap_only, required = scan_sources(extra)
    n_cap = len(set().union(*cap_only.values()))
    print(f"{len(uses)} CUDA identifiers used under plugins/cuda ({len(via_map)} through vendor.h's gpu* names, "
          f"{len(direct)} directly in kernels, {n_cap} only in capability code ({', '.join(CAPS)})):")
    if verbose:
        for ident in sorted(uses):
            print(f"  {ident:48s} {'; '.join(sorted(uses[ident]))}")
    else:
        print("  " + " ".join(sorted(uses)))
    bad = 0
    for name, path in VENDORS.items():
        if not os.path.exists(path):
            print(f"{name}: {os.path.relpath(path, ROOT)} missing")
            bad += 1
            continue
        missing, has_wmma = check_vendor(name, path, uses, via_map, direct, cap_only, required)
        rel = os.path.relpath(path, ROOT)
        if missing:
            bad += 1
            print(f"{name}: {rel}: {len(missing)} unmapped:")
            for ident, why in missing:
                print(f"  {ident}: {why}")
        else:
            print(f"{name}: {rel}: complete ({len(required)} gpu/PYG names; wmma {'mapped' if has_wmma else 'not used'})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
