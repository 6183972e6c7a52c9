"""A tiny Llama with random weights and SmolLM2's tokenizer: a real checkpoint the real CPU engine compiles in a
fraction of SmolLM2's time (2 layers, hidden 64), for tests of compilation itself (the warm-start test). Its text is
noise; nothing reads it."""

from __future__ import annotations

import shutil
from pathlib import Path

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json")


def make_tiny_llama(smoke_model: Path, out: Path) -> Path:
    """out/ holding config.json, model.safetensors and the smoke model's tokenizer; made once (seeded)."""
    if (out / "model.safetensors").is_file():
        return out
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=49152, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                         tie_word_embeddings=True, torch_dtype="bfloat16", bos_token_id=1, eos_token_id=2)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    for name in TOKENIZER_FILES:
        if (smoke_model / name).is_file():
            shutil.copy2(smoke_model / name, tmp / name)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out
