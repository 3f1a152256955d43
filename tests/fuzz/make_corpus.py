"""Write the committed seed corpus of tests/fuzz (small valid GGUF files the fuzzer mutates):
a minimal LLaMA that passes every loader check, its metadata-only twin, and edge layouts."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from pyggml.gguf import GGUFWriter  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def llama(path, n_layer=1, d=32, ff=32, vocab=32, heads=2, extra=None, q=None):
    w = GGUFWriter(path)
    w.add_string("general.architecture", "llama")
    w.add_string("general.name", "seed")
    for k, v in {"vocab_size": vocab, "context_length": 64, "embedding_length": d, "block_count": n_layer,
                 "feed_forward_length": ff, "attention.head_count": heads, "attention.head_count_kv": heads,
                 "rope.dimension_count": d // heads}.items():
        w.add_uint32("llama." + k, v)
    w.add_float32("llama.rope.freq_base", 10000.0)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    for k, v in (extra or {}).items():
        w.add(k, v)
    rng = np.random.default_rng(0)

    def t(name, shape, typ="f32"):
        a = rng.standard_normal(shape).astype(np.float32)
        if typ == "f16":
            a = a.astype(np.float16)
        w.add_tensor(name, a)
    t("token_embd.weight", (vocab, d), q or "f32")
    t("output_norm.weight", (d,))
    for i in range(n_layer):
        p = f"blk.{i}."
        t(p + "attn_norm.weight", (d,))
        t(p + "ffn_norm.weight", (d,))
        for n, s in (("attn_q", (d, d)), ("attn_k", (d, d)), ("attn_v", (d, d)), ("attn_output", (d, d)),
                     ("ffn_gate", (ff, d)), ("ffn_up", (ff, d)), ("ffn_down", (d, ff))):
            t(p + n + ".weight", s, q or "f16")
    w.write()


def main():
    os.makedirs(OUT, exist_ok=True)
    llama(os.path.join(OUT, "llama-1l.gguf"))
    llama(os.path.join(OUT, "llama-2l-rope.gguf"), n_layer=2, d=16, ff=16, vocab=16,
          extra={"llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": 2.0,
                 "llama.rope.type": "neox", "tokenizer.ggml.bos_token_id": 1})
    w = GGUFWriter(os.path.join(OUT, "meta-arrays.gguf"), alignment=64)
    w.add_string("general.architecture", "llama")
    w.add_array("tokenizer.ggml.tokens", ["<s>", "</s>", "a", "b"])
    w.add_array("tokenizer.ggml.scores", np.arange(4, dtype=np.float32))
    w.add_array("nested", [[1, 2], [3]])
    w.add_tensor("x", np.arange(8, dtype=np.int32))
    w.write()


if __name__ == "__main__":
    main()
