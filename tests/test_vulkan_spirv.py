"""Static checks of the SPIR-V the Vulkan plugin embeds (build/vulkan/*.spv.h, glslc's -mfmt=c output),
for rules no driver here can check: lavapipe has no cooperative matrices, so the tensor-core modules
(mul_mat_cm*, flash_attn_cm) only run on a GPU.

The rule checked: a cooperative-matrix load or store needs its start and stride aligned to 16 bytes
(GL_NV_cooperative_matrix, issue 2; VUID-RuntimeSpirv-OpCooperativeMatrixLoadNV / -KHR-08986). Shared
variables have no explicit layout in these modules: the driver places them, one after another in the
module's order, which is glslang's order of first use, not the order of declaration. A 4-byte flag
used before a tile array (flash_attn_cm.comp's chunk flag at 90b1674) lands between two arrays and
leaves every later array 4 bytes off 16, so the matrix loads read shifted tiles: NMSE 1.16 on the
H200 while the emulated build (plain GLSL, no alignment rule) passed on lavapipe. So every Workgroup
variable of a module with cooperative-matrix operations must have a size that is a multiple of 16
bytes (then any order of placement keeps them all aligned), and every literal stride must be too.
A shared array sized by a specialization constant (mul_mat_cm4.comp's configurations) passes when its
elements are 16 bytes or a multiple (any length keeps the next variable aligned), and so does a
stride that is not a literal when it counts such elements."""
import glob
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, "build", "vulkan")

# SPIR-V opcodes used here
OP_TYPE_INT, OP_TYPE_FLOAT, OP_TYPE_VECTOR, OP_TYPE_ARRAY, OP_TYPE_POINTER = 21, 22, 23, 28, 32
OP_CONSTANT, OP_VARIABLE, OP_ACCESS_CHAIN, OP_IN_BOUNDS_ACCESS_CHAIN = 43, 59, 65, 66
OP_CM_LOAD_NV, OP_CM_STORE_NV = 5359, 5360
OP_CM_LOAD_KHR, OP_CM_STORE_KHR = 4457, 4458
STORAGE_WORKGROUP = 4


def read_spv_h(path):
    """The words of a glslc -mfmt=c file ({0x07230203,0x...,...})."""
    with open(path) as f:
        words = [int(w, 16) for w in re.findall(r"0x[0-9a-fA-F]+", f.read())]
    assert words and words[0] == 0x07230203, f"{path}: not SPIR-V"
    return words


def instructions(words):
    i = 5
    while i < len(words):
        n, op = words[i] >> 16, words[i] & 0xFFFF
        assert n > 0, f"bad instruction at word {i}"
        yield op, words[i + 1:i + n]
        i += n


class Module:
    """The types, constants and Workgroup variables of a module, and the cooperative-matrix
    loads/stores with the variable each one addresses and its stride."""

    def __init__(self, words):
        self.types, self.consts, self.ptr_type = {}, {}, {}
        self.spec_sized = {}                 # variable id -> element size, for arrays sized by a specialization
        spec_elem = {}                       # array type id -> element size, the same
        self.shared = []                     # (id, size in bytes, alignment) in module order
        base = {}                            # access-chain result -> the variable it indexes
        self.cm_ops = []                     # (opcode, variable id, stride constant or None, element size)
        for op, a in instructions(words):
            if op == OP_TYPE_INT or op == OP_TYPE_FLOAT:
                self.types[a[0]] = (a[1] // 8, a[1] // 8)
            elif op == OP_TYPE_VECTOR:
                size, _ = self.types[a[1]]
                self.types[a[0]] = (size * a[2], size * (4 if a[2] == 3 else a[2]))
            elif op == OP_TYPE_ARRAY:
                if a[1] in self.types and a[2] in self.consts:
                    size, align = self.types[a[1]]
                    self.types[a[0]] = (size * self.consts[a[2]], align)
                elif a[1] in self.types and self.types[a[1]][0] is not None:
                    spec_elem[a[0]] = self.types[a[1]][0]
                    self.types[a[0]] = (None, self.types[a[1]][1])
            elif op == OP_TYPE_POINTER:
                self.ptr_type[a[0]] = a[2]
            elif op == OP_CONSTANT and len(a) == 3:
                self.consts[a[1]] = a[2]
            elif op == OP_VARIABLE and a[2] == STORAGE_WORKGROUP:
                # (None, None): sized by a specialization constant (only the emulated and scalar shaders)
                self.shared.append((a[1],) + self.types.get(self.ptr_type[a[0]], (None, None)))
                if self.ptr_type[a[0]] in spec_elem:
                    self.spec_sized[a[1]] = spec_elem[self.ptr_type[a[0]]]
                base[a[1]] = a[1]
            elif op in (OP_ACCESS_CHAIN, OP_IN_BOUNDS_ACCESS_CHAIN) and a[2] in base:
                base[a[1]] = base[a[2]]
            elif op in (OP_CM_LOAD_NV, OP_CM_LOAD_KHR) and a[2] in base:
                self.cm_ops.append((op, base[a[2]], self.consts.get(a[3] if op == OP_CM_LOAD_NV else a[4])))
            elif op in (OP_CM_STORE_NV, OP_CM_STORE_KHR) and a[0] in base:
                self.cm_ops.append((op, base[a[0]], self.consts.get(a[2] if op == OP_CM_STORE_NV else a[3])))

    def offsets(self):
        """Each shared variable's byte offset when placed in module order at its natural alignment
        (modulo 16 after an array sized by a specialization, whose size is a multiple of 16)."""
        out, at = {}, 0
        for vid, size, align in self.shared:
            at = (at + align - 1) // align * align
            out[vid] = at
            at += size or 0
        return out


def coopmat_modules():
    paths = sorted(glob.glob(os.path.join(BUILD, "*.spv.h")))
    return [p for p in paths if Module(read_spv_h(p)).cm_ops]


def test_the_tensor_core_modules_are_found():
    if not glob.glob(os.path.join(BUILD, "*.spv.h")):
        pytest.skip("build/vulkan/*.spv.h not built (needs glslc: .ci/apt-vulkan.sh, then make plugins)")
    names = {os.path.basename(p)[:-6] for p in coopmat_modules()}
    assert {"flash_attn_cm", "flash_attn_cm2", "mul_mat_cm", "mul_mat_cm2", "mul_mat_cm128", "mul_mat_cm2_128"} <= names, names
    assert not any(n.endswith("_emu") for n in names), names


@pytest.mark.parametrize("path", coopmat_modules() if os.path.isdir(BUILD) else [],
                         ids=lambda p: os.path.basename(p)[:-6])
def test_coopmat_shared_memory_is_16_byte_aligned(path):
    m = Module(read_spv_h(path))
    unsized = [vid for vid, size, _ in m.shared if size is None and m.spec_sized.get(vid, 1) % 16]
    assert not unsized, f"shared arrays sized at pipeline creation whose elements are not 16-byte multiples: {unsized}"
    odd = [(vid, size) for vid, size, _ in m.shared if size is not None and size % 16]
    assert not odd, f"shared variables whose size is not a multiple of 16 bytes (id, bytes): {odd}"
    off = m.offsets()
    for op, vid, stride in m.cm_ops:
        assert off[vid] % 16 == 0, f"opcode {op} addresses shared %{vid} at byte {off[vid]} (module order)"
    pointee = {vid: (size, align) for vid, size, align in m.shared}
    for op, vid, stride in m.cm_ops:
        assert stride is not None or pointee[vid][1] % 16 == 0, f"opcode {op} on %{vid}: stride not a literal constant"
        stride = 1 if stride is None else stride   # (a whole number of 16-byte elements)
        assert stride * pointee[vid][1] % 16 == 0, f"opcode {op} on %{vid}: stride {stride} elements"


def _glslc(tmp_path, name, source):
    """The glslc -mfmt=c output of a compute shader (skips where glslc is missing)."""
    import shutil
    import subprocess
    glslc = shutil.which("glslc")
    if glslc is None:
        pytest.skip("no glslc here")
    src, out = tmp_path / f"{name}.comp", tmp_path / f"{name}.spv.h"
    src.write_text(source)
    subprocess.run([glslc, "--target-env=vulkan1.2", "-O", "-mfmt=c", "-o", str(out), str(src)], check=True)
    return out


def test_the_check_finds_a_misplaced_flag(tmp_path):
    """The check itself: the layout of flash_attn_cm.comp at 90b1674 (a 4-byte flag used before the
    K/V tile) fails it. Built with glslc from a small shader of that shape."""
    out = _glslc(tmp_path, "t", """#version 450
#extension GL_NV_cooperative_matrix : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_memory_scope_semantics : require
layout(local_size_x = 32) in;
shared float16_t A[16 * 24];
shared uint flag;
shared float16_t B[16 * 24];
layout(binding = 0) buffer O { float o[]; };
void main() {
    A[gl_LocalInvocationID.x] = float16_t(1.0);
    if (gl_LocalInvocationID.x == 0u) flag = 1u;
    B[gl_LocalInvocationID.x] = float16_t(2.0);
    barrier();
    if (flag != 1u) return;
    fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> a, b;
    fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> c = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
    coopMatLoadNV(a, A, 0u, 24u, false);
    coopMatLoadNV(b, B, 0u, 24u, true);
    c = coopMatMulAddNV(a, b, c);
    coopMatStoreNV(c, o, 0u, 16u, false);
}
""")
    m = Module(read_spv_h(str(out)))
    assert len(m.cm_ops) == 2                # the buffer store is not on shared memory
    assert sorted(s for _, s, _ in m.shared) == [4, 768, 768]
    with pytest.raises(AssertionError, match="multiple of 16"):
        test_coopmat_shared_memory_is_16_byte_aligned(str(out))
    if [s for _, s, _ in m.shared] == [768, 4, 768]:   # glslang's order of first use: B lands 4 bytes off 16
        assert m.offsets()[m.cm_ops[1][1]] % 16 == 4


def test_glslc_reaches_the_integer_dot_product(tmp_path):
    """The build machine's glslc (Debian 12: glslang 11.13) knows no GL_EXT_integer_dot_product, but
    GL_EXT_spirv_intrinsics declares SPV_KHR_integer_dot_product's OpSDot (4450) on packed 4 x int8
    words directly: the int8 mat-vec of issue 18 can be built here. The module carries the opcode,
    its capabilities (DotProductInput4x8BitPacked 6018, DotProduct 6019) and the extension."""
    out = _glslc(tmp_path, "dot", """#version 450
#extension GL_EXT_spirv_intrinsics : require
layout(local_size_x = 32) in;
layout(std430, binding = 0) readonly buffer A { uint a[]; };
layout(std430, binding = 1) writeonly buffer O { int o[]; };
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6018, 6019], id = 4450)
int sdot4x8(uint x, uint y, spirv_literal int packed_format);
void main() {
    const uint i = gl_GlobalInvocationID.x;
    o[i] = sdot4x8(a[2 * i], a[2 * i + 1], 0);
}
""")
    ops = list(instructions(read_spv_h(str(out))))
    caps = {args[0] for op, args in ops if op == 17}            # OpCapability
    exts = [args for op, args in ops if op == 10]               # OpExtension
    name = lambda ws: b"".join(w.to_bytes(4, "little") for w in ws).split(b"\0")[0].decode()
    sdot = [args for op, args in ops if op == 4450]
    assert {6018, 6019} <= caps, caps
    assert "SPV_KHR_integer_dot_product" in [name(e) for e in exts]
    assert len(sdot) == 1 and sdot[0][-1] == 0, sdot              # PackedVectorFormat4x8Bit
