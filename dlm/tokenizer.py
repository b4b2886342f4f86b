"""The checkpoint's tokenizer, its chat template and UTF-8-safe streaming detokenisation."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer as HFTokenizer

from dlm.chat_template import ChatTemplate
from dlm.config import CheckpointError, ModelConfig, read_json_object


@dataclass
class Tokenizer:
    backend: HFTokenizer
    template: ChatTemplate | None
    special_tokens: dict[str, int] = field(default_factory=dict)
    eos_token: str | None = None
    bos_token: str | None = None

    @staticmethod
    def from_dir(path: str | Path) -> Tokenizer:
        root = Path(path)
        tok_file = root / "tokenizer.json"
        if not tok_file.exists():
            raise CheckpointError(f"{tok_file}: file not found")
        try:
            backend = HFTokenizer.from_file(str(tok_file))
        except Exception as exc:  # the tokenizers library raises a bare Exception subclass
            raise CheckpointError(f"{tok_file}: cannot be read ({exc})") from None
        conf = read_json_object(root / "tokenizer_config.json", optional=True)
        special = {
            v["content"]: int(k) for k, v in conf.get("added_tokens_decoder", {}).items() if v.get("special")
        }
        for added in backend.get_added_tokens_decoder().items():
            idx, token = added
            if token.special:
                special.setdefault(token.content, idx)
        raw_template = conf.get("chat_template")
        if isinstance(raw_template, list):  # some configs store named templates
            raw_template = next((t["template"] for t in raw_template if t.get("name") == "default"), None)
        return Tokenizer(
            backend=backend,
            template=ChatTemplate(raw_template) if raw_template else None,
            special_tokens=special,
            eos_token=_token_text(conf.get("eos_token")),
            bos_token=_token_text(conf.get("bos_token")),
        )

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def check_matches(self, cfg: ModelConfig) -> None:
        """Refuse a tokenizer that cannot belong to this model (it would decode garbage)."""
        if self.vocab_size > cfg.vocab_size:
            raise CheckpointError(
                f"tokenizer has {self.vocab_size} tokens but the model's vocab_size is {cfg.vocab_size}"
            )
        if cfg.mask_token_id >= cfg.vocab_size:
            raise CheckpointError(f"mask_token_id {cfg.mask_token_id} is outside the vocabulary ({cfg.vocab_size})")
        mask_text = self.backend.id_to_token(cfg.mask_token_id)
        if mask_text is None or mask_text not in self.special_tokens:
            raise CheckpointError(
                f"mask_token_id {cfg.mask_token_id} is {mask_text!r} in the tokenizer, not a special mask token"
            )

    def encode(self, text: str) -> list[int]:
        return self.backend.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int], skip_special: bool = True) -> str:
        return self.backend.decode(ids, skip_special_tokens=skip_special)

    def token_id(self, text: str) -> int | None:
        return self.backend.token_to_id(text)

    def apply_chat_template(
        self,
        messages: list[dict[str, Any]],
        add_generation_prompt: bool = True,
        tools: list[dict[str, Any]] | None = None,
    ) -> str:
        """The prompt text of `messages` (and `tools`), whose strings cannot spell a control token: the
        tokenizer reads added tokens anywhere in the text, so a caller who typed "<|im_end|>" would end their
        turn there and could write the assistant's or a tool's after it."""
        if self.template is None:
            raise CheckpointError("tokenizer_config.json has no chat_template; use raw text")
        return self.template.render(
            _defused(messages, self.control_texts), add_generation_prompt=add_generation_prompt,
            tools=_defused(tools, self.control_texts), bos_token=self.bos_token or "",
            eos_token=self.eos_token or "",
        )

    @cached_property
    def control_texts(self) -> tuple[str, ...]:
        """The added tokens' texts, read once: every prompt render (several per voice turn) defuses them."""
        return tuple(token.content for token in self.backend.get_added_tokens_decoder().values())

    def stop_ids(self, cfg: ModelConfig) -> set[int]:
        """End-of-turn ids: the config's eos ids plus the tokenizer's end-of-turn specials."""
        ids = set(cfg.eos_token_ids)
        for text in ("<|im_end|>", "<|eot_id|>", "<|endoftext|>", self.eos_token):
            if text and text in self.special_tokens:
                ids.add(self.special_tokens[text])
        return ids


def _defused(value: Any, controls: tuple[str, ...]) -> Any:
    """`value` with every string's control tokens broken by a zero-width space after their first character."""
    if isinstance(value, str):
        for control in controls:
            if control in value:
                value = value.replace(control, control[0] + "\u200b" + control[1:])
        return value
    if isinstance(value, list):
        return [_defused(item, controls) for item in value]
    if isinstance(value, dict):
        return {key: _defused(item, controls) for key, item in value.items()}
    return value


def _token_text(value: Any) -> str | None:
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


class IncrementalDecoder:
    """Turns a growing list of final token ids into text pieces: never half a character, never twice, and,
    once :meth:`flush` ends them, all of the text a full decode of the ids gives."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.emitted = ""

    def push(self, new_ids: list[int]) -> str:
        """The new text up to the last complete character: a trailing U+FFFD may be a character whose other
        bytes are still to come, so it waits (for them, or for :meth:`flush`)."""
        self.ids.extend(new_ids)
        return self._advance(self.tokenizer.decode(self.ids).rstrip("\ufffd"))

    def flush(self) -> str:
        """The text held back once no more ids will come: an incomplete character decodes as U+FFFD, as in a
        full decode."""
        return self._advance(self.tokenizer.decode(self.ids))

    def _advance(self, text: str) -> str:
        piece = text[len(self.emitted):] if text.startswith(self.emitted) else ""
        self.emitted = text
        return piece
