"""A byte-level BPE tokenizer trained in-process on the project's own texts (no hub access).

Pre-tokenisation splits every digit into its own piece and keeps runs of non-space, non-digit
characters together (with one leading space), so `\\boxed{12}` becomes `\\boxed{`, `1`, `2`, `}` once
`\\boxed{` is frequent enough to earn a merge. Bytes are mapped to printable characters first, so any
text round-trips exactly and no `<unk>` token is needed.
"""
from __future__ import annotations

from collections.abc import Iterable

from transformers import PreTrainedTokenizerFast

PAD_TOKEN = "<pad>"
EOS_TOKEN = "<eos>"
SPECIAL_TOKENS = [PAD_TOKEN, EOS_TOKEN]

# One digit | an optional space plus a run of non-space non-digits | a run of whitespace.
_PIECE_PATTERN = r"\d| ?[^\s\d]+|\s+"


def train_tokenizer(texts: Iterable[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer on `texts`; ids 0 and 1 are `<pad>` and `<eos>`.

    The vocabulary holds the 2 special tokens, the 256 byte symbols and up to
    `vocab_size - 258` merges (fewer when the texts are small). Padding is on the left, as
    batched generation needs; it is passed to the constructor because only then is it saved.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    byte_alphabet = pre_tokenizers.ByteLevel.alphabet()
    if vocab_size < len(SPECIAL_TOKENS) + len(byte_alphabet):
        raise ValueError(
            f"vocab_size={vocab_size} is below {len(SPECIAL_TOKENS) + len(byte_alphabet)} "
            "(2 special tokens + 256 byte symbols)"
        )
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_PIECE_PATTERN), behavior="isolated"),
            # use_regex=False: the split above already decided the pieces; this only maps bytes.
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=byte_alphabet,
        show_progress=False,
    )
    core.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD_TOKEN,
        eos_token=EOS_TOKEN,
        padding_side="left",
    )
