"""Prompt text → token ids, in the model's own format: a real instruct model (its tokenizer has a chat
template, e.g. SmolLM2-135M-Instruct) gets every prompt as one user turn of its chat template, ending
with the assistant's header, so it answers in the format it was tuned on; a tiny model trained in-process
(no chat template) gets the prompt text as it is, exactly as before this module existed.

Every place a prompt becomes ids goes through `encode_prompts` (the policy's turns, the judge's steps and
benchmark, the coding setting's programs and tests, the llm rewriter) and every supervised pair through
`encode_pairs`, so sampling and the warm-start see the same prompt. A target ends with the tokenizer's
eos token, which for a chat model closes the assistant turn (SmolLM2: <|im_end|>).
"""
from __future__ import annotations

from typing import Any, Sequence


def is_chat(tokenizer: Any) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def encode_prompts(tokenizer: Any, texts: Sequence[str], add_special_tokens: bool = True) -> list[list[int]]:
    """Token ids of each prompt (module doc); `add_special_tokens` is the plain tokenizer call's, for the
    call sites that have always used one or the other."""
    if not texts:
        return []
    if not is_chat(tokenizer):  # the very call of before: no keyword where the default was used
        if add_special_tokens:
            return tokenizer(list(texts))["input_ids"]
        return tokenizer(list(texts), add_special_tokens=False)["input_ids"]
    return [list(tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                               tokenize=True, return_dict=False)) for text in texts]


def encode_pairs(tokenizer: Any, pairs: Sequence[tuple[str, str]]) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, target ids + eos) of supervised (prompt, target) pairs; prompts as `encode_prompts`
    encodes them for sampling (no special tokens for a tiny model, as the warm-start has always done)."""
    prompts = encode_prompts(tokenizer, [p for p, _ in pairs], add_special_tokens=False)
    targets = tokenizer([t for _, t in pairs], add_special_tokens=False)["input_ids"] if pairs else []
    return [(p, t + [tokenizer.eos_token_id]) for p, t in zip(prompts, targets)]
