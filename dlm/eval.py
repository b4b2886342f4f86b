"""Evaluate a checkpoint on the held-out split: `python -m dlm.eval [--model DIR] [--json OUT] [--limit N]`.

Measures, on dialogues whose request templates and values never occur in training:
- tool-call exact match (name and arguments) of free generation at each effort,
- answer correctness: the spoken reply, written after the tool's result, contains the right number or fact
  (and a missed tool call counts as a wrong answer),
- valid JSON of tool calls without constraints and with JSON-schema constrained decoding,
- tool-call exact match through the API's decoding (`dlm.api.span_generation`: the free decoder's call is
  kept when it is valid, decoded again under the schema when it is not) and how often the draft is kept,
- tool-call exact match and answers as the voice stage decodes calls, grounded in the caller's words
  (`dlm.tools.grounding`: a name or number nobody said is decoded again), and how often a call is redone,
- tokens per forward pass at each effort.
Replies are decoded as the product decodes them, with the copy bias toward the caller's words or the tool's
result (`dlm.decoding.logit_bias`); `--copy-bias 0` measures the bare model.
`--failures F` writes each dialogue still wrong that way, or whose free tool call was wrong (asked, expected,
said, what was wrong with the call, grounded call, reply, and whether the answer was right in the end); the
table counts the wrong free calls by what was wrong ("extra label": a label nobody asked for, "wrong
country": a miscopied name).
Without --model it evaluates the shipped checkpoint. `--threshold` / `--factor` decode every effort asked
for (`--efforts`) with that rule instead of the effort's own, and `--confidence-order` commits each pass's
most confident positions instead of a run of the leftmost, to compare rules on the same sample.
`--samples` evaluates several samples (alone: the four docs/demo-model.md averages over) and prints each one's
headline figures and their mean (`dlm.eval_samples`); its JSON holds each sample's report and the mean.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from dlm.api.constrained_generation import constrained_decode
from dlm.api.span_generation import SpanPlan, SpanRun, span_decode
from dlm.cli import DEMO_CHECKPOINT
from dlm.cli_args import (
    ArgumentParser,
    add_placement,
    at_least_one,
    checkpoint,
    factor,
    finite_float,
    output_path,
    refusal,
    threshold,
)
from dlm.config import CheckpointError
from dlm.constrained import CompiledSchema, JsonSchemaConstraint, check
from dlm.decoding.block_causal import CachedForward
from dlm.decoding.confidence import GREEDY
from dlm.decoding.logit_bias import COPY_FOLLOW, LogitBias
from dlm.decoding.schedule import align_up
from dlm.effort import DEFAULT_EFFORT, EFFORTS, Knobs, resolve
from dlm.engine import Engine
from dlm.eval_samples import (
    DOCS_SAMPLES,
    Sample,
    call_errors_line,
    format_summary,
    intent_rows,
    mean_report,
    parse_samples,
)
from dlm.grounded_call import grounded_call
from dlm.kv_cache import KVCache
from dlm.tools import tool_call_schema
from dlm.tools.registry import ASKING_WORDS
from dlm.train.data import Example, generate
from dlm.train.tokenizer import TOOL_CALL, TOOL_CALL_END

MAX_NEW_TOKENS = 64


@dataclass
class Generation:
    ids: list[int]
    passes: int


class CountingForward:
    """A block forward that counts its passes (denoising and commit), as the engine counts them."""

    def __init__(self, inner: CachedForward):
        self.inner, self.passes = inner, 0
        self.device = inner.device

    @property
    def length(self) -> int:
        return self.inner.length

    def denoise(self, window: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        self.passes += 1
        return self.inner.denoise(window, rows)

    def commit(self, window: torch.Tensor) -> torch.Tensor:
        self.passes += 1
        return self.inner.commit(window)


class Assistant:
    """A checkpoint plus the two ways the product decodes a turn: the engine's free block diffusion and the
    API's JSON-schema constrained tool call."""

    def __init__(self, engine: Engine, block_size: int | None = None, rule: dict[str, Any] | None = None,
                 copy_follow: float = COPY_FOLLOW):
        self.engine, self.model, self.tokenizer = engine, engine.model, engine.tokenizer
        self.block_size = block_size
        self.copy_follow = copy_follow  # the replies' copy bias (0: none)
        self.rule = rule or {}  # a threshold or factor, or the pass order, replacing each effort's own (see main)
        self.call_open = self.tokenizer.special_tokens[TOOL_CALL]
        self.call_close = self.tokenizer.special_tokens[TOOL_CALL_END]
        self.call_schema = tool_call_schema()

    def prompt(self, example: Example, upto: int, add_generation_prompt: bool = True) -> list[int]:
        text = self.tokenizer.apply_chat_template(example.messages[:upto], tools=example.tools,
                                                  add_generation_prompt=add_generation_prompt)
        return self.tokenizer.encode(text)

    def fits(self, example: Example) -> bool:
        """Whether the whole dialogue fits the model's context, as every training dialogue does."""
        whole = self.prompt(example, len(example.messages), add_generation_prompt=False)
        return len(whole) <= self.model.cfg.max_position_embeddings

    def _prefilled(self, prompt: list[int], block_size: int) -> CachedForward:
        """A fresh cache holding the prompt's full blocks (the tail is decoded inside the first block)."""
        cfg = self.model.cfg
        capacity = min(cfg.max_position_embeddings, align_up(len(prompt) + MAX_NEW_TOKENS + 1, 16))
        forward = CachedForward(self.model, KVCache(cfg, capacity, dtype=self.model.output_weight().dtype))
        forward.extend(prompt[: len(prompt) // block_size * block_size], block_size)
        return forward

    def copy_bias(self, messages: list[dict[str, Any]]) -> LogitBias | None:
        """The copy bias of the reply to ``messages``, toward what they end with, as the product decodes it."""
        return self.engine.copy_bias(messages, self.copy_follow, ASKING_WORDS)

    def generate(self, prompt: list[int], effort: str, messages: list[dict[str, Any]]) -> Generation:
        """The reply to ``prompt``, the rendering of ``messages``, copy-biased."""
        result = self.engine.generate(prompt, effort=effort, max_new_tokens=MAX_NEW_TOKENS,
                                      block_size=self.block_size, bias=self.copy_bias(messages), **self.rule)
        return Generation(result.token_ids, result.forward_passes)

    @torch.no_grad()
    def constrained_call(self, prompt: list[int], messages: list[dict[str, Any]]) -> Generation:
        """Force a tool call and decode its JSON under the schema of all tool calls, copy-biased, each pass's run
        of commits sized by the default effort's rule (as the API's constrained spans are)."""
        cfg = self.model.cfg
        policy = resolve(cfg, Knobs(effort=DEFAULT_EFFORT, **self.rule), self.engine.stop_ids)
        constraint = JsonSchemaConstraint(self.call_schema, self.engine.vocab, [self.call_close])
        tokens = [*prompt, self.call_open]
        forward = CountingForward(self._prefilled(tokens, cfg.block_size))
        ids = [token for committed in constrained_decode(cfg, forward, tokens, constraint, MAX_NEW_TOKENS, GREEDY,
                                                         policy.bar, bias=self.copy_bias(messages))
               for token in committed]
        return Generation([self.call_open, *ids, self.call_close], forward.passes)

    def api_call(self, prompt: list[int], effort: str, messages: list[dict[str, Any]]) -> tuple[list[int], SpanRun]:
        """Decode as the OpenAI API does with tools (tool_choice auto): free text copy-biased as the API biases
        it, calls under their schema."""
        plan = SpanPlan(open_id=self.call_open, span_schema=self.call_schema, close_id=self.call_close)
        knobs, _ = self.engine.knobs(effort=effort, block_size=self.block_size, **self.rule)
        session, run = self.engine.new_session(), SpanRun()
        try:
            steps = span_decode(self.engine, session, prompt, MAX_NEW_TOKENS, plan, self.engine.vocab, knobs, None, run,
                                self.copy_bias(messages))
            return [token for ids in steps for token in ids], run
        finally:
            session.release()

    def grounded_call(self, prompt: list[int], said: list[int], messages: list[dict[str, Any]],
                      effort: str) -> tuple[dict[str, Any] | None, bool]:
        """The call the voice stage runs after the model said `said` in reply to `messages`, and whether it was
        decoded again: grounded in the caller's last words and the tools' earlier results, again under the
        grounded schema if it does not fit (`dlm.grounded_call`)."""
        body = self.call_body(said)
        if body is None:
            return None, False
        knobs, _ = self.engine.knobs(effort=effort, block_size=self.block_size, **self.rule)
        written, session = self.tokenizer.decode(body, skip_special=False), self.engine.new_session()
        try:
            settled, redone = grounded_call(self.engine, session, prompt, written, messages, knobs, MAX_NEW_TOKENS)
        finally:
            session.release()
        try:
            value = json.loads(settled)
        except json.JSONDecodeError:
            return None, redone
        return (value if isinstance(value, dict) else None), redone

    def text(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special=True)

    def call_body(self, ids: list[int]) -> list[int] | None:
        """The ids between the first call tag and its closing tag (or the end), None without a call."""
        if self.call_open not in ids:
            return None
        body = ids[ids.index(self.call_open) + 1:]
        return body[: body.index(self.call_close)] if self.call_close in body else body

    def parse_call(self, ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        """(whether a tool call was emitted, its parsed JSON or None when it is not valid JSON)."""
        body = self.call_body(ids)
        if body is None:
            return False, None
        try:
            value = json.loads(self.tokenizer.decode(body, skip_special=False))
        except json.JSONDecodeError:
            return True, None
        return True, value if isinstance(value, dict) else None


def _normalised(arguments: dict[str, Any]) -> dict[str, Any]:
    """Arguments as compared: whitespace inside strings (an expression's spacing) ignored."""
    return {k: "".join(v.split()) if isinstance(v, str) else v for k, v in arguments.items()}


def same_call(got: dict[str, Any] | None, want: dict[str, Any]) -> bool:
    """Name and arguments equal (arguments as parsed JSON; whitespace inside expressions ignored)."""
    if not got or got.get("name") != want["name"] or not isinstance(got.get("arguments"), dict):
        return False
    return _normalised(got["arguments"]) == _normalised(want["arguments"])


def call_error(emitted: bool, got: dict[str, Any] | None, want: dict[str, Any]) -> str | None:
    """What is wrong with a free tool call, in the words a data tuner looks for (None: it is exact): no call,
    invalid JSON, the wrong tool, or the first argument that is extra, missing or wrong ("extra label" is a
    label nobody asked for, "wrong country" a miscopied name)."""
    if same_call(got, want):
        return None
    if not emitted:
        return "no call"
    if got is None:
        return "invalid JSON"
    if got.get("name") != want["name"]:
        return "wrong tool"
    arguments = got.get("arguments")
    if not isinstance(arguments, dict):
        return "arguments not an object"
    said, wanted = _normalised(arguments), _normalised(want["arguments"])
    extra, missing = sorted(set(said) - set(wanted)), sorted(set(wanted) - set(said))
    if extra:
        return f"extra {extra[0]}"
    if missing:
        return f"missing {missing[0]}"
    return f"wrong {min(key for key in wanted if said[key] != wanted[key])}"


@dataclass
class Tally:
    counts: dict[str, list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0]))

    def add(self, key: str, ok: bool) -> None:
        self.count(key, int(ok), 1)

    def count(self, key: str, hits: int, total: int) -> None:
        self.counts[key][0] += hits
        self.counts[key][1] += total

    def rate(self, key: str) -> float:
        hit, total = self.counts.get(key, (0, 0))
        return hit / total if total else float("nan")


_GLUED_REPEAT = re.compile(r"\b([a-z]{2,})\1\b")


def stutters(reply: str) -> bool:
    """Whether the reply writes a word twice with nothing between ("2 plusplus 2"): what two neighbouring
    positions decoded in one pass write when both expect the same word. No reply of the training data does."""
    return _GLUED_REPEAT.search(reply.lower()) is not None


def evaluate(assistant: Assistant, sample: list[Example], efforts: tuple[str, ...] = EFFORTS,
             failures: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The figures over the dialogues of `sample` that fit the model's context (`too_long` counts the rest).
    `failures`, when given, receives each dialogue the headline effort got wrong as the product decodes it
    (calls grounded), or whose free call was wrong: what was asked, what was expected, what the model said
    freely and what was wrong with its call, the grounded call and the reply, for whoever tunes the data or the
    model next."""
    examples = [example for example in sample if assistant.fits(example)]
    call_errors: Counter[str] = Counter()  # the headline effort's wrong free calls, by what is wrong
    lead = DEFAULT_EFFORT if DEFAULT_EFFORT in efforts else efforts[0]  # the effort the headline figures are of
    tally = Tally()
    tokens = dict.fromkeys(efforts, 0)
    passes = dict.fromkeys(efforts, 0)
    compiled = CompiledSchema(assistant.call_schema)
    constrained_tokens = constrained_passes = 0
    # disable=None: the bar only on a terminal, so a redirected log gets the table without carriage returns
    for example in tqdm(examples, desc="held-out dialogues", unit="dialogue", leave=False, disable=None):
        ask = example.last_user_index() + 1
        prompt = assistant.prompt(example, ask)
        answer_prompt = assistant.prompt(example, len(example.messages) - 1) if example.call else None
        lead_correct, lead_ids, lead_reply, grounded_call, lead_error = False, [], "", None, None  # the headline's
        for effort in efforts:
            first = assistant.generate(prompt, effort, example.messages[:ask])
            tokens[effort] += len(first.ids)
            passes[effort] += first.passes
            emitted, parsed = assistant.parse_call(first.ids)
            if example.call:
                call_ok = same_call(parsed, example.call)
                tally.add(f"tool_call_exact/{effort}", call_ok)
                tally.add(f"tool_call_exact/{effort}/{example.intent}", call_ok)
                tally.add(f"valid_json_unconstrained/{effort}", parsed is not None and not check(parsed, compiled))
                reply = assistant.generate(answer_prompt, effort, example.messages[:-1])
                tokens[effort] += len(reply.ids)
                passes[effort] += reply.passes
                correct = call_ok and example.reply_is_correct(assistant.text(reply.ids))
            else:
                correct = not emitted and example.reply_is_correct(assistant.text(first.ids))
            tally.add(f"answer_correct/{effort}", correct)
            tally.add(f"answer_correct/{effort}/{example.intent}", correct)
            spoken = reply.ids if example.call else first.ids
            tally.add(f"stuttered/{effort}", stutters(assistant.text(spoken)))
            tally.add(f"unended/{effort}", len(spoken) >= MAX_NEW_TOKENS)  # ran to the cap: a copy loop
            if effort != lead:
                continue
            lead_correct, lead_ids = correct, first.ids
            lead_error = call_error(emitted, parsed, example.call) if example.call else None
            if lead_error:
                call_errors[lead_error] += 1
            lead_reply = assistant.text(reply.ids) if example.call else ""
        if example.call:
            forced = assistant.constrained_call(prompt, example.messages[:ask])
            constrained_tokens += len(forced.ids) - 1  # the forced <tool_call> was not decoded
            constrained_passes += forced.passes
            _, parsed = assistant.parse_call(forced.ids)
            tally.add("valid_json_constrained", parsed is not None and not check(parsed, compiled))
            tally.add("tool_call_exact_constrained", same_call(parsed, example.call))
            ids, run = assistant.api_call(prompt, lead, example.messages[:ask])
            tally.add("tool_call_exact_api", same_call(assistant.parse_call(ids)[1], example.call))
            tally.count("api_draft_kept", run.drafts_kept, run.drafts_kept + run.drafts_redone)
            grounded_call, redone = assistant.grounded_call(prompt, lead_ids, example.messages[:ask], lead)
            tally.add("grounded_redone", redone)
            grounded_ok = same_call(grounded_call, example.call)
            tally.add("tool_call_exact_grounded", grounded_ok)
            tally.add(f"tool_call_exact_grounded/{example.intent}", grounded_ok)
            lead_correct = grounded_ok and example.reply_is_correct(lead_reply)
        tally.add("answer_correct_grounded", lead_correct)
        tally.add(f"answer_correct_grounded/{example.intent}", lead_correct)
        if failures is not None and (not lead_correct or lead_error):
            failures.append({"intent": example.intent, "asked": example.messages[ask - 1]["content"],
                             "expected_call": example.call, "expected_facts": list(example.facts),
                             "said": assistant.tokenizer.decode(lead_ids, skip_special=False),
                             "call_error": lead_error, "grounded_call": grounded_call, "reply": lead_reply or None,
                             "correct": lead_correct})
    intents = sorted({e.intent for e in examples})
    return {
        "examples": len(examples),
        "too_long": len(sample) - len(examples),
        "effort": lead,
        "tool_call_exact": tally.rate(f"tool_call_exact/{lead}"),
        "answer_correct": tally.rate(f"answer_correct/{lead}"),
        "stuttered_replies": tally.rate(f"stuttered/{lead}"),
        "unended_replies": tally.rate(f"unended/{lead}"),
        "valid_json_constrained": tally.rate("valid_json_constrained"),
        "valid_json_unconstrained": tally.rate(f"valid_json_unconstrained/{lead}"),
        "tool_call_exact_constrained": tally.rate("tool_call_exact_constrained"),
        "tokens_per_forward": {e: tokens[e] / max(passes[e], 1) for e in efforts},
        "tokens_per_forward_constrained": constrained_tokens / max(constrained_passes, 1),
        "tool_call_errors": dict(call_errors.most_common()),
        "tool_call_exact_api": tally.rate("tool_call_exact_api"),
        "api_draft_kept": tally.rate("api_draft_kept"),
        "tool_call_exact_grounded": tally.rate("tool_call_exact_grounded"),
        "answer_correct_grounded": tally.rate("answer_correct_grounded"),
        "grounded_redone": tally.rate("grounded_redone"),
        "by_effort": {e: {"tool_call_exact": tally.rate(f"tool_call_exact/{e}"),
                          "answer_correct": tally.rate(f"answer_correct/{e}"),
                          "valid_json_unconstrained": tally.rate(f"valid_json_unconstrained/{e}"),
                          "stuttered_replies": tally.rate(f"stuttered/{e}"),
                          "unended_replies": tally.rate(f"unended/{e}")}
                      for e in efforts},
        "answer_correct_by_intent": {i: tally.rate(f"answer_correct/{lead}/{i}") for i in intents},
        "tool_call_exact_by_intent": {i: tally.rate(f"tool_call_exact/{lead}/{i}") for i in intents
                                      if f"tool_call_exact/{lead}/{i}" in tally.counts},  # intents with a call
        "answer_correct_grounded_by_intent": {i: tally.rate(f"answer_correct_grounded/{i}") for i in intents},
    }


def format_table(report: dict[str, Any]) -> str:
    efforts = list(report["tokens_per_forward"])
    too_long = report["too_long"]
    lines = [f"held-out dialogues: {report['examples']}"
             + (f" ({too_long} left out: longer than the model's context)" if too_long else ""), "",
             f"{'metric':<28}" + "".join(f"{e:>10}" for e in efforts)]
    for metric in ("tool_call_exact", "answer_correct", "valid_json_unconstrained", "stuttered_replies",
                   "unended_replies"):
        lines.append(f"{metric:<28}" + "".join(f"{report['by_effort'][e][metric]:>10.1%}" for e in efforts))
    lines.append(f"{'tokens_per_forward':<28}" + "".join(f"{report['tokens_per_forward'][e]:>10.2f}" for e in efforts))
    lines += ["", f"{'valid_json_constrained':<28}{report['valid_json_constrained']:>10.1%}",
              f"{'tool_call_exact_constrained':<28}{report['tool_call_exact_constrained']:>10.1%}",
              f"{'tokens_per_forward_constr.':<28}{report['tokens_per_forward_constrained']:>10.2f}",
              f"{'tool_call_exact_api':<28}{report['tool_call_exact_api']:>10.1%}",
              f"{'api_draft_kept':<28}{report['api_draft_kept']:>10.1%}", "",
              "grounded in the caller's words (the voice stage's decoding, dlm.tools.grounding):",
              f"{'tool_call_exact_grounded':<28}{report['tool_call_exact_grounded']:>10.1%}",
              f"{'answer_correct_grounded':<28}{report['answer_correct_grounded']:>10.1%}",
              f"{'grounded_redone':<28}{report['grounded_redone']:>10.1%}", "",
              f"by intent ({report['effort']}):{'answer':>18}{'tool call':>10}{'grounded':>10}"]
    lines += intent_rows(report)
    lines += ["", call_errors_line(report["effort"], report["tool_call_errors"])]
    return "\n".join(lines)


def _engine(args: argparse.Namespace) -> Engine:
    """The checkpoint's engine, refused in one line where it cannot load or its tokenizer lacks the tool-call
    tags: every figure of this evaluation is about tool calls."""
    try:
        engine = Engine.from_dir(args.model, args.dtype, args.device)
    except (CheckpointError, ValueError) as err:  # its weights or tokenizer (--model checked config.json); a GPU not there
        raise refusal(str(err)) from None
    missing = [tag for tag in (TOOL_CALL, TOOL_CALL_END) if tag not in engine.tokenizer.special_tokens]
    if missing:
        engine.close()
        raise refusal(f"{args.model}: its tokenizer has no {' or '.join(missing)} token; the evaluation measures "
                      "tool calls and needs a checkpoint trained with the tools")
    return engine


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(prog="python -m dlm.eval", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=checkpoint, default=str(DEMO_CHECKPOINT),
                        help="checkpoint directory (default: the demo)")
    add_placement(parser, dtype="float32")  # the figures the docs quote were measured in float32
    parser.add_argument("--json", type=output_path, help="also write the figures to this JSON file")
    parser.add_argument("--failures", type=output_path, help="also write the dialogues the headline effort got wrong (calls "
                                           "grounded), or whose free tool call was wrong, to this JSON-lines file: "
                                           "asked, expected, said, call_error")
    parser.add_argument("--limit", type=at_least_one, help="held-out dialogues to evaluate (default 200)")
    parser.add_argument("--seed", type=int, help="seed of the held-out sample (default 1)")
    parser.add_argument("--samples", type=parse_samples, nargs="?", const=parse_samples(DOCS_SAMPLES),
                        help=f"several samples instead, LIMIT:SEED,...: each one's headline figures and their "
                             f"mean (alone: {DOCS_SAMPLES}, the four docs/demo-model.md averages over)")
    parser.add_argument("--threads", type=at_least_one, default=2)
    parser.add_argument("--block-size", type=at_least_one, help="decode with this block size instead of the config's")
    parser.add_argument("--efforts", default=",".join(EFFORTS),
                        help=f"comma-separated efforts to decode at (default: all; headline figures are "
                             f"{DEFAULT_EFFORT}'s, or the first one's)")
    rule = parser.add_mutually_exclusive_group()
    rule.add_argument("--threshold", type=threshold, help="decode with this confidence threshold instead of the "
                                                      "efforts' own rules")
    rule.add_argument("--factor", type=factor, help="decode with the factor rule at this factor instead")
    parser.add_argument("--copy-bias", type=finite_float, default=COPY_FOLLOW,
                        help=f"the replies' copy bias toward the caller's words or the tool's result, a logit "
                             f"(default {COPY_FOLLOW}, as the voice assistant decodes, twice that after a tool's result; "
                             f"0: the bare model)")
    parser.add_argument("--confidence-order", action="store_true",
                        help="commit each pass's most confident positions instead of a run of the leftmost")
    args = parser.parse_args(argv)
    efforts = tuple(e.strip() for e in args.efforts.split(",") if e.strip())
    if not efforts or set(efforts) - set(EFFORTS):
        parser.error(f"--efforts takes some of {', '.join(EFFORTS)}, got {args.efforts!r}")
    if args.samples and (args.limit is not None or args.seed is not None):
        parser.error("--samples names each sample's size and seed: leave out --limit and --seed")
    samples = args.samples or [Sample(args.limit or 200, 1 if args.seed is None else args.seed)]
    torch.set_num_threads(args.threads)
    rule: dict[str, Any] = {k: v for k, v in (("threshold", args.threshold), ("factor", args.factor)) if v is not None}
    if args.confidence_order:
        rule["in_order"] = False
    assistant = Assistant(_engine(args), args.block_size, rule, args.copy_bias)
    failures: list[dict[str, Any]] | None = [] if args.failures else None
    reports = []
    for sample in samples:
        found: list[dict[str, Any]] | None = None if failures is None else []
        started = time.monotonic()  # each sample's own time, the model's loading left out
        report = evaluate(assistant, generate("heldout", sample.limit, sample.seed), efforts, found)
        report |= {"limit": sample.limit, "seed": sample.seed, "rule": rule or "each effort's own",
                   "copy_bias": args.copy_bias, "seconds": round(time.monotonic() - started, 1),
                   "model": args.model, "block_size": args.block_size or assistant.model.cfg.block_size}
        reports.append(report)
        if failures is not None and found:
            failures += [{"sample": str(sample), **f} for f in found] if len(samples) > 1 else found
    if len(samples) == 1:
        result: dict[str, Any] = reports[0]
        print(format_table(result))
    else:
        result = {"samples": reports, "mean": mean_report(reports)}
        print(format_summary(samples, reports, result["mean"]))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    if failures is not None:
        Path(args.failures).write_text("".join(json.dumps(f) + "\n" for f in failures))
        print(f"{len(failures)} dialogues to look at in {args.failures} "
              f"({sum(not f['correct'] for f in failures)} wrong as the product decodes them)")


if __name__ == "__main__":
    main()
