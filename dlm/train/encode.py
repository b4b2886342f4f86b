"""Dialogues to token ids plus a per-token flag saying which tokens the model learns to produce.

Targets are the assistant turns (their text, tool calls and closing <|im_end|>); everything else is the
clean context. Spans come from rendering the chat template prefix by prefix, so training sees exactly the
text the engine will build at run time.
"""

from __future__ import annotations

from dataclasses import dataclass

from tokenizers import Tokenizer

from dlm.chat_template import ChatTemplate
from dlm.train.data import Example
from dlm.train.tokenizer import CHAT_TEMPLATE, IM_END


@dataclass
class Encoded:
    ids: list[int]
    targets: list[bool]


class DialogueEncoder:
    def __init__(self, tokenizer: Tokenizer, template: str = CHAT_TEMPLATE):
        self.tokenizer = tokenizer
        self.template = ChatTemplate(template)

    def render(self, example: Example, upto: int | None = None, add_generation_prompt: bool = False) -> str:
        messages = example.messages if upto is None else example.messages[:upto]
        return self.template.render(messages, tools=example.tools, add_generation_prompt=add_generation_prompt)

    def target_spans(self, example: Example) -> list[tuple[int, int]]:
        """Character spans of every assistant message, each ending after its <|im_end|>."""
        spans = []
        for i, message in enumerate(example.messages):
            if message["role"] == "assistant":
                start = len(self.render(example, i, add_generation_prompt=True))
                end = self.render(example, i + 1).rindex(IM_END) + len(IM_END)
                spans.append((start, end))
        return spans

    def encode(self, example: Example) -> Encoded:
        text = self.render(example)
        encoding = self.tokenizer.encode(text, add_special_tokens=False)
        spans = self.target_spans(example)
        targets = [any(s <= a and b <= e for s, e in spans) for a, b in encoding.offsets]
        return Encoded(encoding.ids, targets)
