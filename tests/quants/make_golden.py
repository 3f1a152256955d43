"""Regenerate tests/quants/golden.json: sha256 of ggml's reference quantizer output (the oracle
library that build_oracle.sh makes) on the deterministic data sets of qlib.det_data. Run after
build_oracle.sh; the hashes only change if ggml's reference algorithms change."""
import hashlib
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qlib  # noqa: E402

N = 256 * 32


def main():
    oracle = qlib.Oracle()
    golden = {"n": N, "hashes": {}}
    for kind in qlib.DATA_KINDS:
        x = qlib.det_data(kind, N)
        golden["hashes"][kind] = {
            name: hashlib.sha256(oracle.quantize(name, x).tobytes()).hexdigest() for name in qlib.TYPES}
    path = os.path.join(qlib.HERE, "golden.json")
    with open(path, "w") as f:
        json.dump(golden, f, indent=1, sort_keys=True)
        f.write("\n")
    print("wrote", path)


if __name__ == "__main__":
    main()
