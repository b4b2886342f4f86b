"""The demo checkpoint's byte-level BPE tokenizer, its special tokens and its Qwen-style chat template."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

PAD, IM_START, IM_END, MASK, TOOL_CALL, TOOL_CALL_END = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|mask|>", "<tool_call>", "</tool_call>")
SPECIAL_TOKENS = [PAD, IM_START, IM_END, MASK, TOOL_CALL, TOOL_CALL_END]
SPACE = "\u0120"  # a space as byte-level BPE spells it ("Ġ"), a token of its own here

# Qwen-style turns. Tools are listed by name only: the demo model knows its tools from training and a
# 256-token context has no room for their full schemas. Arguments given as a string are emitted verbatim
# (the OpenAI wire form), a mapping is serialised with tojson.
NL = "{{ '\\n' }}"  # newlines as expressions: trim_blocks would swallow literal ones after a tag
CHAT_TEMPLATE = (
    "{% if messages and messages[0].role == 'system' or tools %}"
    "<|im_start|>system"
    "{% if messages and messages[0].role == 'system' %}" + NL + "{{ messages[0].content }}{% endif %}"
    "{% if tools %}" + NL + "tools: {% for t in tools %}{{ (t.function or t).name }}"
    "{% if not loop.last %}, {% endif %}{% endfor %}{% endif %}"
    "<|im_end|>" + NL +
    "{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'system' and loop.first %}"
    "{% elif m.role == 'assistant' %}"
    "<|im_start|>assistant" + NL + "{{ m.content or '' }}"
    "{% for tc in m.tool_calls or [] %}"
    "{% set f = tc.function or tc %}"
    "<tool_call>{\"name\": \"{{ f.name }}\", \"arguments\": "
    "{% if f.arguments is string %}{{ f.arguments }}{% else %}{{ f.arguments | tojson }}{% endif %}}</tool_call>"
    "{% endfor %}"
    "<|im_end|>" + NL +
    "{% else %}"
    "<|im_start|>{{ m.role }}" + NL + "{{ m.content }}<|im_end|>" + NL +
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant" + NL + "{% endif %}"
)


def train_tokenizer(texts: Iterable[str], vocab_size: int, max_token_length: int = 0) -> Tokenizer:
    """A byte-level BPE over `texts` with the special tokens at ids 0..5.

    Spaces are tokens of their own and digits are split one by one, so a word or a number is the same ids
    wherever it stands: "brazil" after a space in the request and after a quote in the tool call's JSON.
    Copying a value is then copying ids, which a small model learns fast and which carries over to values
    it never saw. Input is lower-cased: the corpus is speech-recognition text, so typed text ("What is the
    capital of France?") reaches the model in the same form. A `max_token_length` splits long names seen in
    training into pieces too, the same kind of pieces a name never seen is split into."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(" ", behavior="isolated"),
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  max_token_length=max_token_length or None)
    tokenizer.train_from_iterator(texts, trainer)
    return tokenizer


def save_tokenizer(tokenizer: Tokenizer, out_dir: str | Path, max_length: int) -> None:
    """tokenizer.json plus a tokenizer_config.json carrying the chat template and special-token roles."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(out / "tokenizer.json"))
    decoder = {str(tokenizer.token_to_id(t)): {"content": t, "special": True, "lstrip": False, "rstrip": False,
                                               "normalized": False, "single_word": False}
               for t in SPECIAL_TOKENS}
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "added_tokens_decoder": decoder,
        "bos_token": None,
        "eos_token": IM_END,
        "pad_token": PAD,
        "mask_token": MASK,
        "model_max_length": max_length,
        "chat_template": CHAT_TEMPLATE,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
