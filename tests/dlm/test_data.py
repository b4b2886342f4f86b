"""The synthetic corpus: seeded, split by template and by value, tool calls valid, tokenizer faithful."""

from __future__ import annotations

import json
import random
import re
from collections import Counter

import jsonschema
import pytest
from tokenizers import Tokenizer

from dlm.chat_template import ChatTemplate
from dlm.tools import tool_call_schema
from dlm.tools.facts import CAPITALS
from dlm.train.asr import CLOSERS, FILLERS, OPENERS, asr_noise
from dlm.train.config import RunConfigError, from_dict
from dlm.train.data import EARLIER_TURN, HELDOUT_EVERY, Context, Example, generate
from dlm.train.encode import DialogueEncoder
from dlm.train.intents import (
    ARITH,
    CANCEL_ASKS,
    CAPITAL_ASKS,
    CAPITAL_FOLLOW,
    CHAT,
    CONVERT_ASKS,
    DATE_ASKS,
    DAY_ASKS,
    FOLLOW,
    LABEL_ASKS,
    LIST_ASKS,
    ONSETS,
    POWERS,
    REFUSALS,
    REPEAT_ASKS,
    SPELL_AGAIN,
    SPELL_ASKS,
    TIME_ASKS,
    TIMER_ASKS,
    WORDS,
)
from dlm.train.tokenizer import CHAT_TEMPLATE, SPECIAL_TOKENS, train_tokenizer


def test_same_seed_same_corpus() -> None:
    first, again, other = generate("train", 60, 3), generate("train", 60, 3), generate("train", 60, 4)
    assert [e.messages for e in first] == [e.messages for e in again]
    assert [e.messages for e in first] != [e.messages for e in other]


def test_template_pools_are_disjoint() -> None:
    for templates in (CAPITAL_ASKS, ARITH["+"][0]):
        train = {Context("train", random.Random(i)).template(templates) for i in range(200)}
        held = {Context("heldout", random.Random(i)).template(templates) for i in range(200)}
        assert train and held and not train & held
        assert train | held == set(templates)


REQUEST_LISTS = [TIME_ASKS, DATE_ASKS, DAY_ASKS, CONVERT_ASKS, TIMER_ASKS, LABEL_ASKS, CANCEL_ASKS, LIST_ASKS,
                 CAPITAL_ASKS, CAPITAL_FOLLOW, SPELL_ASKS, SPELL_AGAIN, REPEAT_ASKS, *FOLLOW.values(),
                 *(entry[0] for entry in (*ARITH.values(), *POWERS.values(), *CHAT.values())), *REFUSALS.values()]


def template_words(template: str) -> set[str]:
    return set(re.findall(r"[a-z]+", re.sub(r"\{\w+\}('s)?", " ", template)))


def test_heldout_requests_reword_only_words_training_requests_use() -> None:
    """A model trained from scratch on this corpus can generalise to a new wording of words it has seen, not
    to a word it never met ("{a} less {b}" with "less" in no training request): such a template would test
    knowledge no checkpoint trained here can have."""
    held = [t for ts in REQUEST_LISTS for i, t in enumerate(ts) if i % HELDOUT_EVERY == HELDOUT_EVERY - 1]
    seen = set().union(*(template_words(t) for ts in REQUEST_LISTS for i, t in enumerate(ts)
                         if i % HELDOUT_EVERY != HELDOUT_EVERY - 1))
    assert len(held) > 60
    assert {t: sorted(template_words(t) - seen) for t in held if template_words(t) - seen} == {}


def test_recognised_requests_keep_their_values_and_vary_their_wrapping() -> None:
    heard = [asr_noise("What's 17 plus Brazil?", random.Random(seed)) for seed in range(400)]
    for text in heard:
        words = text.split()
        assert "?" not in text and words.index("17") < words.index("brazil"), text
    own_openers = [opener for opener in OPENERS if opener.split()[0] not in " ".join(FILLERS).split()]
    assert any(text.startswith(tuple(own_openers)) or any(f" {o} " in text for o in own_openers) for text in heard)
    assert any(text.endswith(tuple(f" {closer}" for closer in CLOSERS)) for text in heard)
    assert len(set(heard)) > 20


def call_values(split: str, count: int) -> dict[str, set[str]]:
    values: dict[str, set[str]] = {}
    for example in generate(split, count, 0):
        if example.call and example.intent in ("arithmetic", "conversion", "capital", "timer"):
            args = example.call["arguments"]
            if "country" in args and args["country"] not in CAPITALS:
                continue  # made-up names are random in both splits; the held-out countries are real ones
            key = json.dumps({k: v for k, v in args.items() if k != "label"}, sort_keys=True)
            values.setdefault(example.call["name"], set()).add(key)
        if example.intent == "spelling":
            values.setdefault("spelling", set()).add(example.facts[0])
    return values


def test_heldout_values_never_occur_in_training() -> None:
    train, held = call_values("train", 1500), call_values("heldout", 400)
    assert set(held) == {"calculator", "convert_units", "country_capital", "set_timer", "spelling"}
    for name, values in held.items():
        assert values and not values & train[name], name


def test_training_also_spells_made_up_words_and_heldout_spells_only_listed_ones() -> None:
    def spelled(split: str) -> set[str]:
        return {example.facts[0].replace(", ", "") for example in generate(split, 800, 3, intents=["spelling"])}

    listed = set(WORDS)
    made_up = spelled("train") - listed
    assert len(made_up) > 200 and not made_up & set(CAPITALS)
    assert any(onset in word for word in made_up for onset in ONSETS)  # the varied inventory, not only CV
    assert spelled("heldout") <= listed


def test_every_tool_call_fits_the_schema_and_every_result_is_json() -> None:
    schema = tool_call_schema()
    for example in generate("train", 300, 1) + generate("heldout", 100, 1):
        for message in example.messages:
            for call in message.get("tool_calls", []):
                jsonschema.validate(call["function"], schema)
            if message["role"] == "tool":
                assert isinstance(json.loads(message["content"]), dict)
        assert all(example.facts)


def test_final_reply_holds_the_fact() -> None:
    for example in generate("heldout", 200, 2):
        assert example.messages[-1]["role"] == "assistant"
        assert example.reply_is_correct(example.messages[-1]["content"])


@pytest.fixture(scope="module")
def tokenizer_and_corpus():
    examples = generate("train", 300, 0)
    renderer = DialogueEncoder(None)  # type: ignore[arg-type]
    texts = [renderer.render(e) for e in examples]
    return train_tokenizer(texts, 500), examples, texts


def test_tokenizer_round_trip_and_special_tokens(tokenizer_and_corpus) -> None:
    tokenizer, _, texts = tokenizer_and_corpus
    assert [tokenizer.token_to_id(t) for t in SPECIAL_TOKENS] == list(range(len(SPECIAL_TOKENS)))
    assert tokenizer.get_vocab_size() == 500
    for text in texts[:50] + ["héllo wörld 😀 12.5", "<tool_call>{}</tool_call>"]:
        ids = tokenizer.encode(text).ids
        assert tokenizer.decode(ids, skip_special_tokens=False) == text
    for special in SPECIAL_TOKENS:
        assert tokenizer.encode(f"a{special}b").ids[1] == tokenizer.token_to_id(special)
    assert tokenizer.encode("What is the Capital of FRANCE").ids == tokenizer.encode("what is the capital of france").ids


def test_a_token_length_limit_splits_long_words_and_still_round_trips(tokenizer_and_corpus) -> None:
    _, _, texts = tokenizer_and_corpus
    unlimited, limited = train_tokenizer(texts, 500), train_tokenizer(texts, 500, max_token_length=4)

    def longest(tokenizer: Tokenizer) -> int:
        return max(len(t) for t in tokenizer.get_vocab() if t not in SPECIAL_TOKENS)

    assert longest(limited) <= 4 < longest(unlimited)
    for text in texts[:20]:
        ids = limited.encode(text).ids
        assert limited.decode(ids, skip_special_tokens=False) == text
        assert len(ids) >= len(unlimited.encode(text).ids)


def test_targets_are_exactly_the_assistant_turns(tokenizer_and_corpus) -> None:
    tokenizer, examples, _ = tokenizer_and_corpus
    encoder = DialogueEncoder(tokenizer)
    for example in examples[:50]:
        encoded = encoder.encode(example)
        target_text = tokenizer.decode([i for i, t in zip(encoded.ids, encoded.targets, strict=True) if t],
                                       skip_special_tokens=False)
        expected = ""
        for message in example.messages:
            if message["role"] == "assistant":
                expected += message["content"]
                for call in message.get("tool_calls", []):
                    expected += f'<tool_call>{json.dumps(call["function"])}</tool_call>'
                expected += "<|im_end|>"
        assert target_text == expected


def test_template_renders_string_and_object_arguments_alike() -> None:
    template = ChatTemplate(CHAT_TEMPLATE)
    args = {"value": 5, "from_unit": "km", "to_unit": "mi"}

    def call(arguments):
        return [{"role": "user", "content": "x"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"type": "function", "function": {"name": "convert_units", "arguments": arguments}}]}]

    assert template.render(call(args)) == template.render(call(json.dumps(args)))
    with_tools = template.render([{"role": "user", "content": "hi"}], add_generation_prompt=True,
                                 tools=[{"type": "function", "function": {"name": "get_time"}}])
    assert with_tools == ("<|im_start|>system\ntools: get_time<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
                          "<|im_start|>assistant\n")


def test_intent_weights_shift_the_mix_and_are_checked() -> None:
    default = Counter(e.intent for e in generate("train", 600, 0))
    heavy = Counter(e.intent for e in generate("train", 600, 0, weights={"repeat": 100, "arithmetic": 0}))
    assert heavy["repeat"] > 3 * default["repeat"] and heavy["arithmetic"] == 0 < default["arithmetic"]
    with pytest.raises(ValueError, match="unknown intents nonsense"):
        generate("train", 5, 0, weights={"nonsense": 1})
    with pytest.raises(ValueError, match="must not be negative"):
        generate("train", 5, 0, weights={"repeat": -1})
    run = from_dict({"data": {"intent_weights": {"repeat": 16}}})
    assert run.data.intent_weights == {"repeat": 16}


def test_a_share_of_dialogues_make_an_unrelated_request_before_the_final_one() -> None:
    def tools_called(example: Example) -> set[str]:
        return {c["function"]["name"] for m in example.messages for c in m.get("tool_calls", [])}

    def share_calling_two_tools(share: float) -> float:
        examples = generate("train", 400, 0, earlier_turn=share)
        return sum(len(tools_called(e)) > 1 for e in examples) / len(examples)

    single, default, conversation = map(share_calling_two_tools, (0.0, EARLIER_TURN, 1.0))
    assert single < 0.1 < default < 0.3 < conversation  # follow-ups such as a timer's cancel call two alone
    narrowed = [generate("train", 50, 0, intents=["time"], earlier_turn=s) for s in (0.0, 1.0)]
    assert [e.messages for e in narrowed[0]] == [e.messages for e in narrowed[1]]  # probes isolate one skill
    assert from_dict({"data": {"earlier_turn": 0.5}}).data.earlier_turn == 0.5
    with pytest.raises(RunConfigError, match="earlier_turn is a share"):
        from_dict({"data": {"earlier_turn": 1.5}})
