#!/usr/bin/env python3
"""Generates pyggml/_abi_consts.py from the ABI headers (include/pyggml/*.h), so Python has one
source of truth for the ABI: every integer #define and enum value, the type traits table, op
names, and the C declarations (structs, enums, function pointers) as a cffi cdef.

    python3 scripts/gen_abi.py            # (re)write pyggml/_abi_consts.py (make does this)
    python3 scripts/gen_abi.py --check    # exit 1 when the committed file differs from the headers

tests/test_abi_consts.py checks the generated values and the layout of every struct against the
C compiler's view of the same headers.
"""
import argparse
import ast
import operator
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADERS = ["types.h", "ops.h", "tensor.h", "plugin.h"]
OUT = os.path.join(ROOT, "pyggml", "_abi_consts.py")

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
           ast.Div: operator.floordiv, ast.LShift: operator.lshift, ast.RShift: operator.rshift,
           ast.BitOr: operator.or_, ast.BitAnd: operator.and_}


def c_int(expr, names):
    """Value of a C integer constant expression (literals with u/l suffixes, + - * / << >> | &,
    names defined earlier); None when it is not one."""
    e = re.sub(r"\b(0x[0-9a-fA-F]+|\d+)[uUlL]+\b", r"\1", expr.strip())
    try:
        tree = ast.parse(e, mode="eval").body
    except SyntaxError:
        return None

    def ev(n):
        if isinstance(n, ast.Constant) and isinstance(n.value, int):
            return n.value
        if isinstance(n, ast.Name) and n.id in names:
            return names[n.id]
        if isinstance(n, ast.BinOp) and type(n.op) in _BINOPS:
            return _BINOPS[type(n.op)](ev(n.left), ev(n.right))
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            return -ev(n.operand)
        raise ValueError(ast.dump(n))
    try:
        return ev(tree)
    except (ValueError, KeyError):
        return None


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"\\\n", " ", text)   # join continued lines (multi-line macros)
    return re.sub(r"//[^\n]*", "", text)


def drop_functions(text):
    """Remove `static inline` function definitions (brace-matched)."""
    out, i = [], 0
    for m in re.finditer(r"static\s+inline\b", text):
        if m.start() < i:
            continue
        j = text.index("{", m.end())
        depth, k = 0, j
        while True:
            depth += {"{": 1, "}": -1}.get(text[k], 0)
            k += 1
            if depth == 0:
                break
        out.append(text[i:m.start()])
        i = k
    out.append(text[i:])
    return "".join(out)


def parse(include_dir):
    names, order, cdef = {}, [], []
    traits, op_names = {}, []
    for h in HEADERS:
        raw = open(os.path.join(include_dir, h)).read()
        text = strip_comments(raw)
        # every object-like #define whose value is an integer constant expression
        for m in re.finditer(r"^\s*#\s*define\s+(PYG_\w+)[ \t]+([^\n]+)$", text, re.M):
            v = c_int(m.group(2), names)
            if v is not None:
                names[m.group(1)] = v
                order.append(m.group(1))
        # enum members (explicit values or previous + 1)
        for body in re.findall(r"typedef\s+enum\s+\w*\s*\{(.*?)\}", text, re.S):
            nxt = 0
            for item in body.split(","):
                item = item.strip()
                if not item:
                    continue
                name, _, val = (s.strip() for s in item.partition("="))
                v = c_int(val, names) if val else nxt
                names[name] = v
                order.append(name)
                nxt = v + 1
        if h == "types.h":
            fn = raw[raw.index("pyg_type_get_traits(int32_t type) {"):]
            fn = fn[:fn.index("default:")]
            inits = dict(re.findall(r"(\w+)\s*=\s*(\{[^}]*\})", fn))
            for tname, var in re.findall(r"case\s+(PYG_TYPE_\w+):\s*return\s*&(\w+);", fn):
                parts = [p.strip() for p in inits[var].strip("{} \n").split(",")]
                traits[names[tname]] = (ast.literal_eval(parts[0]), c_int(parts[1], names), c_int(parts[2], names),
                                        c_int(parts[3], names))
        if h == "ops.h":
            arr = re.search(r"names\[\]\s*=\s*\{(.*?)\}", text, re.S).group(1)
            op_names = [ast.literal_eval(s.strip()) for s in arr.split(",") if s.strip()]
        # declarations for cffi: drop directives, extern "C" braces, inline functions, export macros
        decl = drop_functions(text)
        decl = re.sub(r"^\s*#.*$", "", decl, flags=re.M)
        decl = re.sub(r'extern\s+"C"\s*\{', "", decl)
        decl = re.sub(r"^\s*\}\s*$", "", decl, flags=re.M)   # the closing brace of extern "C"
        for n in sorted((n for n in names if n.startswith("PYG_MAX_")), key=len, reverse=True):
            decl = re.sub(rf"\b{n}\b", str(names[n]), decl)
        cdef.append(f"/* {h} */\n" + "\n".join(ln.rstrip() for ln in decl.splitlines() if ln.strip()))
    return names, order, traits, op_names, "\n".join(cdef)


def render(include_dir=os.path.join(ROOT, "include", "pyggml")):
    names, order, traits, op_names, cdef = parse(include_dir)
    assert len(op_names) == names["PYG_OP_COUNT"], "ops.h: pyg_op_name's table and the enum disagree"
    lines = ['"""The ABI constants and declarations of include/pyggml/*.h, for Python.',
             "",
             "GENERATED by scripts/gen_abi.py from the headers (make regenerates it when they change;",
             "tests/test_abi_consts.py checks it against the C compiler). Do not edit.",
             '"""', ""]
    seen = set()
    for n in order:
        if n in seen:
            continue
        seen.add(n)
        v = names[n]
        lines.append(f"{n[4:] if n.startswith('PYG_') else n} = {hex(v) if v >= 1 << 16 else v}")
    lines += ["", "# type id: (name, block_size, type_size, is_quantized), pyg_type_get_traits",
              "TYPE_TRAITS = {"]
    lines += [f"    {k}: {v!r}," for k, v in sorted(traits.items())]
    lines += ["}", "", "# op id -> name, pyg_op_name", f"OP_NAMES = {tuple(op_names)!r}", "",
              "# the C declarations, for cffi (ffi.cdef(CDEF)): #define'd sizes are substituted", 'CDEF = r"""']
    lines += [cdef, '"""', ""]
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed file, write nothing")
    ap.add_argument("-o", "--out", default=OUT)
    a = ap.parse_args(argv)
    text = render()
    if a.check:
        cur = open(a.out).read() if os.path.exists(a.out) else ""
        if cur != text:
            print(f"{a.out} is stale: run python3 scripts/gen_abi.py")
            return 1
        return 0
    if not os.path.exists(a.out) or open(a.out).read() != text:
        with open(a.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
