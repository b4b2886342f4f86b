"""The shipped demo checkpoint: small, loads like any SDAR checkpoint, and answers held-out questions
through real tool calls."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import jsonschema
import pytest
from safetensors import safe_open

from dlm.cli import DEMO_CHECKPOINT
from dlm.engine import Engine
from dlm.eval import Assistant, call_error, main, same_call
from dlm.tools import ToolSession, tool_call_schema
from dlm.train.data import Example, generate


@pytest.fixture(scope="module")
def assistant() -> Assistant:
    return Assistant(Engine.from_dir(DEMO_CHECKPOINT))


def test_checkpoint_is_small_and_in_the_sdar_format() -> None:
    files = {p.name: p.stat().st_size for p in Path(DEMO_CHECKPOINT).iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
            "generation_config.json"} <= set(files)
    assert sum(files.values()) <= 10 * 1024 * 1024
    config = json.loads((DEMO_CHECKPOINT / "config.json").read_text())
    assert config["model_type"] == "sdar" and config["tie_word_embeddings"]
    with safe_open(str(DEMO_CHECKPOINT / "model.safetensors"), framework="pt") as f:
        assert "model.layers.0.self_attn.q_norm.weight" in f.keys()  # noqa: SIM118
        assert str(f.get_tensor("model.embed_tokens.weight").dtype) == "torch.bfloat16"


def first_heldout(intent: str) -> Example:
    return next(e for e in generate("heldout", 400, 11) if e.intent == intent)


def heldout_tool_questions(assistant: Assistant, per_intent: int = 8) -> list[Example]:
    """The first held-out dialogues of every tool intent that fit the context, as `dlm.eval` scores them:
    requests and values training never saw."""
    chosen: dict[str, list[Example]] = {}
    for example in generate("heldout", 400, 11):
        if example.call is not None and assistant.fits(example) and len(chosen.setdefault(example.intent, [])) < per_intent:
            chosen[example.intent].append(example)
    return [e for group in chosen.values() for e in group]


@pytest.fixture(scope="module")
def first_replies(assistant: Assistant) -> list[tuple[Example, list[int]]]:
    """What the model says first to each held-out tool question (medium effort)."""
    asks = [(example, example.last_user_index() + 1) for example in heldout_tool_questions(assistant)]
    return [(example, assistant.generate(assistant.prompt(example, ask), "medium", example.messages[:ask]).ids)
            for example, ask in asks]


@pytest.fixture(scope="module")
def first_calls(assistant: Assistant, first_replies: list[tuple[Example, list[int]]]
                ) -> list[tuple[Example, dict | None]]:
    return [(example, assistant.parse_call(ids)[1]) for example, ids in first_replies]


def test_picks_the_right_tool_for_most_heldout_questions(first_calls: list[tuple[Example, dict | None]]) -> None:
    # 10 tool intents, 9 tools: chance is about 1 in 9. The shipped checkpoint measured 72 of 76.
    right = sum(bool(call) and call.get("name") == example.call["name"] for example, call in first_calls)
    assert right >= 0.75 * len(first_calls)


def test_answers_heldout_questions_through_real_tool_calls(assistant: Assistant,
                                                          first_calls: list[tuple[Example, dict | None]]) -> None:
    """Call -> the real tool -> the spoken reply, end to end. Exact arguments are still the demo model's
    weak spot (held-out tool-call exact match is in dlm/assets/demo/eval.json), so this asks for at least one
    whole round trip among the 76 questions, each checked against what the real tool returned."""
    answered = []
    for example, call in first_calls:
        if not same_call(call, example.call):
            continue
        ask = example.last_user_index() + 1
        result = ToolSession().run_safely(call["name"], call["arguments"])
        conversation = Example(example.intent, [*example.messages[:ask],
                                                {"role": "assistant", "content": "", "tool_calls": [
                                                    {"type": "function", "function": call}]},
                                                {"role": "tool", "content": result}], None, example.facts)
        reply = assistant.text(assistant.generate(assistant.prompt(conversation, len(conversation.messages)),
                                                  "medium", conversation.messages).ids)
        spoken = json.loads(result).get("spoken")  # a fresh session has no timer to cancel: an error, no spoken result
        if spoken and spoken in reply:
            answered.append((example.messages[ask - 1]["content"], reply))
    assert answered


def test_turns_end_with_the_end_of_turn_token(assistant: Assistant) -> None:
    budget = 64  # a unit conversion, the longest call, is 50 tokens with its end tokens
    chat = [e for e in generate("heldout", 300, 11) if e.call is None and e.intent != "spelling"][:6]
    for example in chat:
        prompt = assistant.prompt(example, example.last_user_index() + 1)
        result = assistant.engine.generate(prompt, max_new_tokens=budget)
        assert result.finish_reason == "stop", (example.messages[-2]["content"], result.text)
    # tool-call turns end too, right after their call
    time_turns = [e for e in generate("heldout", 400, 11) if e.intent == "time"][:4]
    results = [assistant.engine.generate(assistant.prompt(e, e.last_user_index() + 1), max_new_tokens=budget)
               for e in time_turns]
    assert all(result.finish_reason == "stop" for result in results)


def test_opened_tool_calls_are_closed(assistant: Assistant, first_replies: list[tuple[Example, list[int]]]) -> None:
    """The call's frame is structure the model must always get right, even where its arguments are wrong
    (unconstrained valid JSON is in eval.json)."""
    opened = [ids for _, ids in first_replies if ids and ids[0] == assistant.call_open]
    closed = sum(assistant.call_close in ids for ids in opened)
    assert len(opened) >= 0.5 * len(first_replies) and closed >= 0.9 * len(opened), (len(opened), closed)


def test_constrained_tool_call_is_valid_json(assistant: Assistant) -> None:
    example = first_heldout("conversion")
    ask = example.last_user_index() + 1
    forced = assistant.constrained_call(assistant.prompt(example, ask), example.messages[:ask])
    _, call = assistant.parse_call(forced.ids)
    jsonschema.validate(call, tool_call_schema())


def test_api_calls_are_valid_and_as_exact_as_the_models_own(assistant: Assistant,
                                                            first_calls: list[tuple[Example, dict | None]]) -> None:
    """Through the API's decoding a call the model drafts valid is kept and an invalid one is decoded again
    under the schema, so every call is valid and none of the free decoder's exact calls is lost to the
    constrained decoder's left-to-right order. Copy-biased, the model drafts all of these 76 valid (71 exact);
    the bare model (no copy bias) drafted one invalid, so the redo runs too (measured: kept 75, redid 1)."""
    kept = redone = exact = 0
    bare = Assistant(assistant.engine, copy_follow=0.0)
    for example, _ in first_calls:
        ask = example.last_user_index() + 1
        for way in (assistant, bare):
            ids, run = way.api_call(way.prompt(example, ask), "medium", example.messages[:ask])
            kept, redone = kept + run.drafts_kept, redone + run.drafts_redone
            emitted, call = way.parse_call(ids)
            if emitted:
                jsonschema.validate(call, tool_call_schema())
            if way is assistant:
                exact += same_call(call, example.call)
    assert kept and redone, (kept, redone)  # both ways ran on the real model
    assert exact >= sum(same_call(call, example.call) for example, call in first_calls) - 2


def test_eval_cli_compares_rules_on_chosen_efforts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m dlm.eval --efforts medium --factor F --confidence-order`: one effort, decoded with the rule
    given in the order given, and a JSON report that says which (the README's rule comparisons are made this
    way)."""
    out, failures = tmp_path / "eval.json", tmp_path / "failures.jsonl"
    main(["--limit", "4", "--seed", "3", "--efforts", "medium", "--factor", "1.0", "--confidence-order",
          "--json", str(out), "--failures", str(failures)])
    report = json.loads(out.read_text())
    wrong = [json.loads(line) for line in failures.read_text().splitlines()]
    assert sum(not w["correct"] for w in wrong) == round((1 - report["answer_correct_grounded"]) * report["examples"])
    assert Counter(w["call_error"] for w in wrong if w["call_error"]) == report["tool_call_errors"]
    assert all({"intent", "asked", "expected_call", "said", "grounded_call", "reply"} <= set(w) for w in wrong)
    assert report["effort"] == "medium" and report["rule"] == {"factor": 1.0, "in_order": False}
    assert list(report["tokens_per_forward"]) == ["medium"] and report["tokens_per_forward"]["medium"] > 0
    assert all(0 <= report[k] <= 1 for k in ("tool_call_exact", "answer_correct", "valid_json_constrained",
                                             "tool_call_exact_grounded", "answer_correct_grounded")
               if report[k] == report[k])  # NaN when the sample holds no tool question
    printed = capsys.readouterr().out
    assert "by intent (medium):" in printed and f"{len(wrong)} dialogues to look at in {failures}" in printed
    assert set(report["tool_call_exact_by_intent"]) <= set(report["answer_correct_by_intent"])
    for bad in (["--efforts", "fast"], ["--threshold", "0.9", "--factor", "1.0"]):
        with pytest.raises(SystemExit) as exit_info:
            main(["--limit", "1", *bad])
        assert exit_info.value.code == 2


def test_eval_over_several_samples_prints_each_and_their_mean(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m dlm.eval --samples 3:3,2:5`: each sample's report as `--limit N --seed S` makes it, and the
    mean of their rates (each sample counts once), the wrong calls' kinds summed, failures named by sample."""
    out, single, failures = tmp_path / "eval.json", tmp_path / "single.json", tmp_path / "failures.jsonl"
    main(["--samples", "3:3,2:5", "--efforts", "medium", "--json", str(out), "--failures", str(failures)])
    printed = capsys.readouterr().out
    result = json.loads(out.read_text())
    first, second = result["samples"]
    assert (first["limit"], first["seed"], second["limit"], second["seed"]) == (3, 3, 2, 5)
    main(["--limit", "2", "--seed", "5", "--efforts", "medium", "--json", str(single)])
    alone = json.loads(single.read_text())
    for key in ("answer_correct", "answer_correct_grounded", "tool_call_errors", "answer_correct_by_intent"):
        assert alone[key] == second[key]
    mean = result["mean"]
    assert mean["answer_correct"] == pytest.approx((first["answer_correct"] + second["answer_correct"]) / 2)
    assert mean["tool_call_errors"] == dict(Counter(first["tool_call_errors"]) + Counter(second["tool_call_errors"]))
    assert set(mean["answer_correct_by_intent"]) == set(first["answer_correct_by_intent"]) | set(
        second["answer_correct_by_intent"])
    rows = [word for line in printed.splitlines() for word in line.split()[:1] if ":" in word or word == "mean"]
    assert rows == ["3:3", "2:5", "mean"]
    assert {json.loads(line)["sample"] for line in failures.read_text().splitlines()} <= {"3:3", "2:5"}
    for bad in (["--samples", "3"], ["--samples", "3:1,3:1"], ["--samples", "0:1"], ["--samples", "2:1", "--limit", "2"]):
        with pytest.raises(SystemExit) as exit_info:
            main(bad)
        assert exit_info.value.code == 2


def test_call_errors_name_what_a_wrong_call_got_wrong() -> None:
    """The eval's breakdown of wrong free calls: the first thing wrong, in a data tuner's words."""
    want = {"name": "set_timer", "arguments": {"amount": 16, "unit": "minutes"}}
    cases = [
        (True, {"name": "set_timer", "arguments": {"unit": "minutes", "amount": 16}}, None),
        (False, None, "no call"),
        (True, None, "invalid JSON"),
        (True, {"name": "list_timers", "arguments": {}}, "wrong tool"),
        (True, {"name": "set_timer", "arguments": [16]}, "arguments not an object"),
        (True, {"name": "set_timer", "arguments": {"amount": 16, "unit": "minutes", "label": "bre"}}, "extra label"),
        (True, {"name": "set_timer", "arguments": {"amount": 16}}, "missing unit"),
        (True, {"name": "set_timer", "arguments": {"amount": 6, "unit": "minute"}}, "wrong amount"),
        (True, {"name": "set_timer", "arguments": {"amount": 16, "unit": "hours"}}, "wrong unit"),
    ]
    assert [call_error(emitted, got, want) for emitted, got, _ in cases] == [kind for *_, kind in cases]
    spaced = {"name": "calculator", "arguments": {"expression": "51 - 22"}}
    assert call_error(True, {"name": "calculator", "arguments": {"expression": "51-22"}}, spaced) is None
    assert call_error(True, {"name": "calculator", "arguments": {"expression": "51 ** 22"}}, spaced) == "wrong expression"


def test_eval_leaves_out_dialogues_longer_than_the_context(assistant: Assistant) -> None:
    """Training drops dialogues over the context, so the eval does too instead of failing on the prompt."""
    short, long = (Example("repeat", [{"role": "user", "content": f"say {words}"},
                                      {"role": "assistant", "content": f"{words}."}], None, (words,))
                   for words in ("kelmaria 12", "kelmaria 12 " * 60))
    assert assistant.fits(short) and not assistant.fits(long)
    assert len(assistant.prompt(long, 1)) > assistant.model.cfg.max_position_embeddings // 2


def test_an_api_call_near_the_end_of_the_context_stops_there(assistant: Assistant) -> None:
    """The API path caps its budget at the room the prompt leaves: a held-out conversation 5 tokens short of the
    context had made it decode windows of nothing for ever."""
    ctx = assistant.model.cfg.max_position_embeddings
    messages = [{"role": "user", "content": "say " + "kelmaria 12 " * 80}]
    prompt = assistant.prompt(Example("repeat", messages, None, ()), 1)[-(ctx - 5):]
    ids, _ = assistant.api_call(prompt, "medium", messages)
    assert 0 < len(ids) <= 5
