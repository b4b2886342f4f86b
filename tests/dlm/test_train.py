"""Training: the block-diffusion batch has the right attention, a tiny run learns, resuming is exact."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, models

from dlm.checkpoint import load_checkpoint
from dlm.model import block_causal_mask, sdpa
from dlm.train.candidates import curriculum_loss, train_with_candidates
from dlm.train.config import CurriculumConfig, RunConfig, RunConfigError, from_dict
from dlm.train.encode import Encoded
from dlm.train.objective import decoding_targets, make_batch
from dlm.train.phases import load_state, save_state
from dlm.train.tokenizer import train_tokenizer
from dlm.train.train import (
    BatchSource,
    Phase,
    curriculum_over,
    learning_rate,
    next_phase,
    pace_note,
    prepare_data,
    train,
)

MASK, PAD = 3, 0


def test_batch_attention_and_masking() -> None:
    # 6 tokens, block 2: targets in blocks 1 and 2 only, so two noisy blocks (4 positions) come first.
    item = Encoded(ids=[10, 11, 12, 13, 14, 15], targets=[False, False, False, True, True, True])
    gen = torch.Generator().manual_seed(0)
    batch = make_batch([item], block_size=2, mask_id=MASK, pad_id=PAD, eps=0.999, inverse_t=False, generator=gen)
    assert batch.positions[0].tolist() == [2, 3, 4, 5, 0, 1, 2, 3, 4, 5]
    assert batch.ids[0].tolist() == [12, MASK, MASK, MASK, 10, 11, 12, 13, 14, 15]  # prompt token stays clean
    assert sorted(batch.labels.tolist()) == [13, 14, 15]
    mask = batch.mask[0]
    noisy_block1, noisy_block2, clean = [0, 1], [2, 3], list(range(4, 10))
    assert mask[0][noisy_block1].all() and not mask[0][noisy_block2].any()  # own block, bidirectional
    assert mask[0][4:6].all() and not mask[0][6:10].any()  # clean blocks before its own only
    assert mask[2][4:8].all() and not mask[2][8:10].any()
    assert not mask[clean][:, :4].any()  # clean tokens never see noisy ones
    clean_mask = mask[4:, 4:]
    block = torch.arange(6) // 2
    assert torch.equal(clean_mask, block[None, :] <= block[:, None])  # block-causal


def test_complementary_copies_mask_every_target_once_and_never_see_each_other() -> None:
    item = Encoded(ids=[10, 11, 12, 13, 14, 15], targets=[False, False, False, True, True, True])
    for seed in range(5):
        gen = torch.Generator().manual_seed(seed)
        batch = make_batch([item], block_size=2, mask_id=MASK, pad_id=PAD, eps=0.05, inverse_t=False,
                           generator=gen, complementary=True)
        # two copies of blocks 1 and 2 (4 positions each), then the clean sequence
        assert batch.positions[0].tolist() == [2, 3, 4, 5, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5]
        assert sorted(batch.labels.tolist()) == [13, 14, 15]  # each target masked in exactly one copy
        first, second = batch.ids[0, :4], batch.ids[0, 4:8]
        assert first[0] == second[0] == 12  # the prompt token is clean in both
        assert ((first[1:] == MASK) ^ (second[1:] == MASK)).all()
        mask = batch.mask[0]
        assert not mask[:4, 4:8].any() and not mask[4:8, :4].any()
        assert torch.equal(mask[:4, 8:], mask[4:8, 8:])  # both read the same clean prefix


def test_everything_after_a_blocks_first_target_is_learned() -> None:
    # block 4: answer 13..15, next turn 16..18 (clean in the data), a second answer 19..20, then padding
    item = Encoded(ids=list(range(10, 21)), targets=[False] * 3 + [True] * 3 + [False] * 3 + [True, True])
    ids, targets = decoding_targets(item, block_size=4, pad_id=PAD)
    assert ids.tolist() == [*range(10, 21), PAD]
    assert targets.int().tolist() == [0, 0, 0, 1, 1, 1, 1, 1, 0, 1, 1, 1]


def tiny_run(tmp: Path, steps: int, checkpoint_every: int = 10, curriculum_steps: int = 0,
             until_loss: float = 0.0, finish_steps: int = 0) -> dict:
    curriculum = {"intents": ["repeat", "capital"], "steps": curriculum_steps, "examples": 40,
                  "until_loss": until_loss, "loss_window": 3}
    finish = {"steps": finish_steps, "examples": 40, "intent_weights": {"spelling": 200.0}}
    return {
        "curriculum": curriculum if curriculum_steps else {},
        "finish": finish if finish_steps else {},
        "data": {"train_examples": 240, "vocab_size": 400, "max_length": 256},
        "model": {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "num_kv_heads": 1, "head_dim": 16,
                  "intermediate_size": 64, "block_size": 4},
        "train": {"out_dir": str(tmp / "out"), "state_dir": str(tmp / "state"), "steps": steps, "batch_size": 8,
                  "lr": 3e-3, "warmup_steps": 3, "checkpoint_every": checkpoint_every, "threads": 1,
                  "block_sizes": [4, 8]},
    }


def test_tiny_run_learns_and_exports_a_loadable_checkpoint(tmp_path: Path) -> None:
    result = train(from_dict(tiny_run(tmp_path, steps=40)), progress=False)
    assert result.steps == 40
    assert sum(result.losses[-8:]) / 8 < sum(result.losses[:8]) / 8 - 0.5
    model, tokenizer = load_checkpoint(result.out_dir)
    assert model.cfg.model_type == "sdar" and model.cfg.block_size == 4
    assert tokenizer.template is not None and tokenizer.special_tokens["<|mask|>"] == model.cfg.mask_token_id
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                 "generation_config.json"):
        assert (result.out_dir / name).exists()


def test_fine_tuning_starts_from_the_checkpoint_and_keeps_its_tokenizer(tmp_path: Path) -> None:
    base = train(from_dict(tiny_run(tmp_path / "base", steps=40)), progress=False)
    config = tiny_run(tmp_path / "tuned", steps=3)
    config["train"] |= {"init_from": str(base.out_dir), "lr": 1e-4}
    tuned = train(from_dict(config), progress=False)
    assert (tuned.out_dir / "tokenizer.json").read_text() == (base.out_dir / "tokenizer.json").read_text()
    # three small steps from the base: its loss, not a random model's (about ln(vocab) = 6)
    assert tuned.losses[0] < base.losses[0] - 1.0 and abs(tuned.losses[0] - base.losses[-1]) < 1.0
    before, after = (load_checkpoint(result.out_dir)[0].state_dict() for result in (base, tuned))
    change = max(float((after[n].float() - before[n].float()).abs().max()) for n in before)
    assert 0 < change < 0.05

    config["model"]["hidden_size"] = 64
    with pytest.raises(ValueError, match="init_from .* its shape is not the run's"):
        train(from_dict(config), progress=False)


def test_a_named_tokenizer_is_kept_whatever_the_data(tmp_path: Path) -> None:
    """[data] tokenizer: another mix trains on the named run's tokenizer, where on its own it would train another."""
    base = train(from_dict(tiny_run(tmp_path / "base", steps=2)), progress=False)
    given = base.out_dir.parent / "state" / "tokenizer.json"
    other = tiny_run(tmp_path / "other", steps=2)
    other["data"] |= {"seed": 1, "intent_weights": {"capabilities": 50.0}}
    fresh = train(from_dict(other), progress=False)
    other["data"]["tokenizer"] = str(given)
    other["train"] |= {"out_dir": str(tmp_path / "kept" / "out"), "state_dir": str(tmp_path / "kept" / "state")}
    kept = train(from_dict(other), progress=False)
    assert (kept.out_dir / "tokenizer.json").read_text() == (base.out_dir / "tokenizer.json").read_text()
    assert (fresh.out_dir / "tokenizer.json").read_text() != (base.out_dir / "tokenizer.json").read_text()


def test_a_named_tokenizer_the_run_cannot_use_is_refused_in_one_line(tmp_path: Path) -> None:
    small = tmp_path / "small.json"
    tokens = train_tokenizer(["what can you do", "how are you"], 300)
    tokens.save(str(small))
    plain = tmp_path / "plain.json"
    Tokenizer(models.BPE()).save(str(plain))
    for path, why in ((tmp_path / "missing.json", "not a tokenizer.json"),
                      (plain, "lacks the special tokens <|endoftext|>, <|im_start|>"),
                      (small, f"has {tokens.get_vocab_size()} tokens, [data] vocab_size is 400")):
        config = tiny_run(tmp_path, steps=2)
        config["data"]["tokenizer"] = str(path)
        with pytest.raises(RunConfigError, match=re.escape(why)):
            train(from_dict(config), progress=False)
    config["train"]["init_from"] = str(tmp_path)
    with pytest.raises(RunConfigError, match="both name a tokenizer"):
        from_dict(config)


def test_a_checkpoint_to_fine_tune_whose_tokenizer_lacks_the_special_tokens_is_refused(tmp_path: Path) -> None:
    base = train(from_dict(tiny_run(tmp_path / "base", steps=2)), progress=False)
    Tokenizer(models.BPE()).save(str(base.out_dir / "tokenizer.json"))
    config = tiny_run(tmp_path / "tuned", steps=2)
    config["train"]["init_from"] = str(base.out_dir)
    with pytest.raises(RunConfigError, match=re.escape(f"[train] init_from {base.out_dir}: its tokenizer lacks "
                                                       "the special tokens <|endoftext|>")):
        train(from_dict(config), progress=False)


def test_a_compiled_run_trains_as_the_eager_one_does(tmp_path: Path) -> None:
    # the same batches, masks and init: compiled layers may only reorder floating-point sums
    eager = train(from_dict(tiny_run(tmp_path / "eager", steps=6)), progress=False)
    config = tiny_run(tmp_path / "compiled", steps=6)
    config["train"]["compile"] = True
    compiled = train(from_dict(config), progress=False)
    assert compiled.losses == pytest.approx(eager.losses, rel=1e-3)
    model, _ = load_checkpoint(compiled.out_dir)
    assert model.cfg.num_layers == 1


def test_a_bf16_run_trains_close_to_the_fp32_one(tmp_path: Path) -> None:
    # bf16 matmuls round differently (so the losses move), but the same batches and init keep them close
    fp32 = train(from_dict(tiny_run(tmp_path / "fp32", steps=6)), progress=False)
    config = tiny_run(tmp_path / "bf16", steps=6)
    config["train"]["bf16"] = True
    bf16 = train(from_dict(config), progress=False)
    assert bf16.losses != fp32.losses
    assert bf16.losses == pytest.approx(fp32.losses, rel=3e-2)
    model, _ = load_checkpoint(bf16.out_dir)
    assert next(model.parameters()).dtype == torch.float32


def test_a_curriculum_kept_fp32_steps_as_the_fp32_run_and_then_in_bf16(tmp_path: Path) -> None:
    """`[curriculum] bf16 = false`: the copying race draws as an fp32 run's, and the full mix gets bf16's speed."""
    def run(name: str, bf16: bool) -> RunConfig:
        config = tiny_run(tmp_path / name, steps=8, curriculum_steps=4)
        config["train"]["bf16"] = bf16
        config["curriculum"]["bf16"] = False
        return from_dict(config)

    fp32, mixed = (train(run(name, bf16), progress=False) for name, bf16 in (("fp32", False), ("mixed", True)))
    assert mixed.phase_starts["full"] == fp32.phase_starts["full"] == 4
    assert mixed.losses[:4] == fp32.losses[:4] and mixed.losses[4:] != fp32.losses[4:]


def test_attention_stays_fp32_under_cpu_autocast() -> None:
    # bf16 training autocasts the projections only: the CPU's bf16 attention trains slower and rounds more
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, heads, 10, 16, generator=gen) for heads in (4, 2, 2))
    mask = block_causal_mask(10, 4)
    plain = sdpa(q, k, v, mask)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        autocast = sdpa(q, k, v.bfloat16(), mask)
    assert autocast.dtype == torch.float32
    assert torch.allclose(autocast, plain, atol=1e-2) and not torch.equal(autocast, plain)


@pytest.mark.parametrize(("curriculum_steps", "until_loss", "switch"), [(0, 0.0, 0), (4, 0.0, 4), (10, 99.0, 3)])
def test_resume_continues_exactly(tmp_path: Path, curriculum_steps: int, until_loss: float, switch: int) -> None:
    # with a curriculum, the run stops after the switch to the full corpus and resumes in the new phase; when
    # the switch came from the loss (any loss is under 99 once the 3-step window is full), the state has it
    def run(name: str) -> dict:
        return from_dict(tiny_run(tmp_path / name, steps=12, curriculum_steps=curriculum_steps,
                                  until_loss=until_loss))

    straight = train(run("a"), progress=False)
    first = train(run("b"), progress=False, stop_after=6)
    resumed = train(run("b"), resume=True, progress=False)
    assert first.steps == 6 and resumed.steps == 12
    assert straight.phase_starts["full"] == resumed.phase_starts["full"] == switch
    assert resumed.losses == straight.losses
    a = torch.load(tmp_path / "a" / "state" / "state.pt")["model"]
    b = torch.load(tmp_path / "b" / "state" / "state.pt")["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_candidates_carry_on_the_seed_whose_curriculum_loss_is_lowest(tmp_path: Path) -> None:
    config = tiny_run(tmp_path / "picked", steps=12, curriculum_steps=6)
    config["curriculum"]["candidates"] = 2
    picked = train_with_candidates(from_dict(config), progress=False)
    candidates = tmp_path / "picked" / "state" / "candidates"
    losses = {seed: curriculum_loss(candidates / f"seed-{seed}" / "state.pt", window=3) for seed in (0, 1)}
    assert losses[0] != losses[1]
    best = min(losses, key=losses.__getitem__)
    # carrying the best candidate on is exactly training its seed from the start
    plain = tiny_run(tmp_path / "plain", steps=12, curriculum_steps=6)
    plain["train"]["seed"] = best
    straight = train(from_dict(plain), progress=False)
    assert picked.steps == 12 and picked.losses == straight.losses
    assert straight.losses[:6] != torch.load(candidates / f"seed-{1 - best}" / "state.pt")["losses"][:6]


def test_with_until_loss_the_first_candidate_under_it_wins(tmp_path: Path) -> None:
    # any loss is under 99 once the 3-step window is full: whichever candidate gets there first carries on
    config = tiny_run(tmp_path, steps=8, curriculum_steps=6, until_loss=99.0)
    config["curriculum"]["candidates"] = 2
    picked = train_with_candidates(from_dict(config), progress=False)
    state = torch.load(tmp_path / "state" / "state.pt")
    winner = state["config"]["train"]["seed"]
    assert picked.phase_starts["full"] == 3 and picked.steps == 8
    raced = torch.load(tmp_path / "state" / "candidates" / f"seed-{winner}" / "state.pt")
    assert raced["step"] == 3 and state["losses"][:3] == raced["losses"]


def test_a_race_resumed_under_another_model_is_refused_in_one_line(tmp_path: Path) -> None:
    """A candidate's refusal reaches the run as its own line (it had been the candidate's traceback, then the
    run's 'the curriculum of seed 0 failed (exit code 1)')."""
    config = tiny_run(tmp_path, steps=8, curriculum_steps=2)
    config["curriculum"]["candidates"] = 2
    train_with_candidates(from_dict(config), progress=False)
    (tmp_path / "state" / "state.pt").unlink()  # as a run stopped during its race leaves it
    config["model"]["hidden_size"] = 48
    with pytest.raises(RunConfigError, match=r"^the curriculum of seed \d: .*state.pt holds a model of another "
                                             r"shape than \[model\] \(hidden_size 32, not 48\): resume with"):
        train_with_candidates(from_dict(config), resume=True, progress=False)


def test_a_state_is_replaced_whole_or_not_at_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run killed while it saved had left a truncated state.pt, its only copy."""
    path = tmp_path / "state.pt"
    save_state({"step": 1}, path)

    def killed_mid_write(state: dict, file: Path) -> None:
        Path(file).write_bytes(b"PK half a state")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", killed_mid_write)
    with pytest.raises(KeyboardInterrupt):
        save_state({"step": 2}, path)
    assert load_state(path) == {"step": 1}


def _running(pid: int) -> bool:
    """Whether process `pid` still runs (an exited child nobody has reaped yet counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="finds the candidates through Linux's /proc")
def test_a_run_killed_outright_takes_its_racing_candidates_with_it(tmp_path: Path) -> None:
    config = tiny_run(tmp_path, steps=10**6, checkpoint_every=1, curriculum_steps=10**6)
    config["curriculum"]["candidates"] = 2
    script = ("from dlm.train.candidates import train_with_candidates; from dlm.train.config import from_dict; "
              f"train_with_candidates(from_dict({config!r}), progress=False)")
    # started the way `python -m dlm.train ... &` starts from a script: with SIGINT ignored, which the candidates
    # inherit and which once left them deaf to the interrupt that stops them
    run = subprocess.Popen([sys.executable, "-c", script], preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    states = [tmp_path / "state" / "candidates" / f"seed-{seed}" / "state.pt" for seed in (0, 1)]
    deadline = time.monotonic() + 180
    while not all(state.exists() for state in states):  # both candidates are training
        assert run.poll() is None and time.monotonic() < deadline
        time.sleep(0.2)
    candidates = [int(pid) for pid in Path(f"/proc/{run.pid}/task/{run.pid}/children").read_text().split()]
    run.kill()  # SIGKILL: no cleanup of the run's own can stop them
    run.wait()
    deadline = time.monotonic() + 60
    while any(_running(pid) for pid in candidates) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(candidates) >= 2 and not any(_running(pid) for pid in candidates)


def test_curriculum_only_stops_where_the_curriculum_ends_and_a_resume_goes_no_further(tmp_path: Path) -> None:
    run = from_dict(tiny_run(tmp_path, steps=40, curriculum_steps=4))
    first = train(run, progress=False, curriculum_only=True)
    again = train(run, resume=True, progress=False, curriculum_only=True)
    assert first.steps == again.steps == 4 and first.phase_starts == {"curriculum": 0, "full": 4}


def test_a_curriculum_only_session_leaves_the_full_corpus_unencoded(tmp_path: Path) -> None:
    run = from_dict(tiny_run(tmp_path, steps=40, curriculum_steps=4))
    train(run, progress=False, curriculum_only=True)  # trains and saves the tokenizer the candidates share
    _, phases = prepare_data(run, tmp_path / "state", resume=True, curriculum_only=True)
    assert phases[0].corpus and phases[1].corpus == [] and phases[1].first_step is None
    source = BatchSource(phases, 8, seed=0)  # an empty phase no step reaches is allowed...
    source.begin("full", 4)
    with pytest.raises(RuntimeError, match="not loaded"):  # ...and says so if one does
        source.batch(4)
    _, full = prepare_data(run, tmp_path / "state", resume=True)
    assert len(full[1].corpus) > 100


def test_the_learning_rate_decays_by_the_clock_when_the_time_limit_comes_first() -> None:
    run = from_dict({"train": {"steps": 1010, "warmup_steps": 10, "lr": 1e-3, "min_lr_ratio": 0.1,
                               "max_minutes": 10.0}})
    by_steps = [learning_rate(run, step) for step in (10, 510, 1010)]
    assert by_steps == pytest.approx([1e-3, 0.55e-3, 1e-4])  # peak, half-way down the cosine, floor
    # a slow machine: step 10 after half the time limit is scheduled as step 505, and at the limit the floor
    assert learning_rate(run, 10, seconds=300.0) == pytest.approx(learning_rate(run, 505))
    assert learning_rate(run, 10, seconds=600.0) == pytest.approx(1e-4)
    # ahead of the pace that meets the limit at the last step: the step count alone, bit for bit
    assert learning_rate(run, 510, seconds=290.0) == by_steps[1]
    assert learning_rate(run, 0, seconds=0.5) == learning_rate(run, 0)  # behind by less than a step


def test_the_warm_up_and_the_curriculum_follow_their_steps_whatever_the_clock_says() -> None:
    run = from_dict({"train": {"steps": 1010, "warmup_steps": 10, "lr": 1e-3, "max_minutes": 10.0},
                     "curriculum": {"intents": ["repeat"], "steps": 500}})
    # 30 s of compiling before step 2 would put the clock 50 steps on, past the warm-up
    assert learning_rate(run, 2, seconds=30.0) == learning_rate(run, 2) == pytest.approx(0.3e-3)
    # a candidate on a quarter of the cores is far behind the pace; its rate is its step's all the same
    assert learning_rate(run, 300, seconds=400.0, in_curriculum=True) == learning_rate(run, 300, in_curriculum=True)
    assert learning_rate(run, 300, seconds=400.0) < learning_rate(run, 300)  # the full mix keeps to the clock


def test_a_curriculum_with_its_own_cosine_keeps_its_rates_whatever_the_runs_length() -> None:
    def run(steps: int, cosine_steps: int = 0) -> RunConfig:
        return from_dict({"train": {"steps": steps, "warmup_steps": 10, "lr": 1e-3},
                          "curriculum": {"intents": ["repeat"], "steps": 500, "cosine_steps": cosine_steps}})

    short, long, long_fixed = run(1010), run(2010), run(2010, cosine_steps=1010)
    assert learning_rate(long, 300, in_curriculum=True) > learning_rate(short, 300, in_curriculum=True)
    for step in (2, 10, 300, 499):
        assert learning_rate(long_fixed, step, in_curriculum=True) == learning_rate(short, step, in_curriculum=True)
    assert learning_rate(long_fixed, 600) == learning_rate(long, 600)  # the full mix follows the run's steps
    with pytest.raises(RunConfigError, match="cosine_steps"):
        run(1010, cosine_steps=5)


def test_a_run_behind_the_pace_says_early_where_it_will_stop() -> None:
    run = from_dict({"train": {"steps": 1000, "max_minutes": 1.0}})
    # 200 steps in the 20 s since step 100 at 10 s: 10 steps/s for the 30 s left
    reached, line = pace_note(run, 300, 30.0, since=(100, 10.0))
    assert reached == 600 and "about step 600 of 1000" in line and "10.0 steps/s" in line
    assert pace_note(run, 300, 10.0, since=(100, 5.0)) is None  # 40 steps/s: all 1000 with time to spare
    assert pace_note(run, 300, 70.0, since=(100, 10.0))[0] == 300  # past the limit: it stops here


def test_the_loop_says_where_a_slow_run_stops_once_its_full_mix_has_a_pace(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("dlm.train.train.PACE_SKIP", 2)
    monkeypatch.setattr("dlm.train.train.PACE_AFTER", 4)
    config = tiny_run(tmp_path, steps=10**6, curriculum_steps=2)
    config["train"]["max_minutes"] = 1.0  # a tiny model's steps are fast, but not 16,000 a second
    # the session that leaves the curriculum, then one resumed in the full mix, as the main process is after a race
    for session in (dict(stop_after=10), dict(resume=True, stop_after=20)):
        train(from_dict(config), progress=False, **session)
        said = [line for line in capsys.readouterr().out.splitlines() if "steps/s" in line]
        assert len(said) == 1 and re.search(r"reaches about step \d+ of 1000000 by max_minutes=1.0", said[0]), said


def test_the_loop_tells_the_schedule_which_steps_are_the_curriculums(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    rates: list[tuple[int, bool]] = []

    def recorded(run: RunConfig, step: int, seconds: float = 0.0, in_curriculum: bool = False) -> float:
        rates.append((step, in_curriculum))
        return learning_rate(run, step, seconds, in_curriculum)

    monkeypatch.setattr("dlm.train.train.learning_rate", recorded)
    train(from_dict(tiny_run(tmp_path, steps=10, curriculum_steps=5)), progress=False)
    assert rates == [(step, step < 5) for step in range(10)]  # once a step, for both parameter groups


def test_the_time_limit_counts_every_session_of_a_run(tmp_path: Path) -> None:
    config = tiny_run(tmp_path, steps=12)
    first = train(from_dict(config), progress=False, stop_after=6)
    spent = torch.load(tmp_path / "state" / "state.pt")["seconds"]
    assert 0 < spent <= first.seconds  # the training time, export aside
    config["train"]["max_minutes"] = spent / 60  # all spent by the first session
    resumed = train(from_dict(config), resume=True, progress=False)
    assert resumed.steps == 7  # one step, then over the limit


def test_curriculum_steps_draw_only_from_the_curriculum_corpus_then_only_from_the_full_one() -> None:
    opening = [Encoded(ids=[1] * n, targets=[True] * n) for n in range(3, 13)]  # ids 1: curriculum
    full = [Encoded(ids=[2] * n, targets=[True] * n) for n in range(3, 33)]
    source = BatchSource([Phase("curriculum", 0, opening), Phase("full", 7, full)], batch_size=4, seed=0)
    drawn = [{token for item in source.batch(step) for token in item.ids} for step in range(20)]
    assert drawn[:7] == [{1}] * 7 and drawn[7:] == [{2}] * 13
    epoch = [id(item) for step in range(7, 14) for item in source.batch(step)]  # 30 // 4 = 7 batches an epoch
    assert len(set(epoch)) == 28  # no dialogue twice within an epoch
    with pytest.raises(ValueError, match="cannot fill a batch of 16"):
        BatchSource([Phase("curriculum", 0, opening)], batch_size=16, seed=0)


def test_a_phase_may_draw_batches_of_its_own_size() -> None:
    """`[curriculum] batch_size`: the race keeps its batches of 16 while the full mix takes 32."""
    opening = [Encoded(ids=[1] * n, targets=[True] * n) for n in range(3, 13)]
    full = [Encoded(ids=[2] * n, targets=[True] * n) for n in range(3, 33)]
    source = BatchSource([Phase("curriculum", 0, opening, batch_size=2), Phase("full", 3, full)], batch_size=8, seed=0)
    assert [len(source.batch(step)) for step in range(6)] == [2, 2, 2, 8, 8, 8]
    with pytest.raises(ValueError, match="cannot fill a batch of 12"):
        BatchSource([Phase("curriculum", 0, opening, batch_size=12)], batch_size=2, seed=0)


def test_the_finish_trains_the_last_steps_on_its_own_mix_and_resumes_inside_it(tmp_path: Path) -> None:
    def run(name: str) -> RunConfig:
        return from_dict(tiny_run(tmp_path / name, steps=12, curriculum_steps=4, finish_steps=4))

    straight = train(run("a"), progress=False)
    assert straight.phase_starts == {"curriculum": 0, "full": 4, "finish": 8}
    train(run("b"), progress=False, stop_after=10)
    resumed = train(run("b"), resume=True, progress=False)
    assert resumed.phase_starts == straight.phase_starts and resumed.losses == straight.losses
    # from step 8 on, the batches are the finish's: fresh dialogues of its mix, twice as many with a spelling
    tokenizer, phases = prepare_data(run("a"), tmp_path / "a" / "state", resume=True)
    full, finish = phases[1].corpus, phases[2].corpus
    spelled = [sum("spell_word" in tokenizer.decode(item.ids) for item in corpus) / len(corpus)
               for corpus in (full, finish)]
    source = BatchSource(phases, 8, seed=0)
    for name, step in straight.phase_starts.items():
        source.begin(name, step)
    assert all(any(item is drawn for item in finish) for drawn in source.batch(8))
    assert not any(any(item is drawn for item in finish) for drawn in source.batch(7))
    assert spelled[1] > spelled[0] + 0.25 and len(finish) <= 40 < len(full)


def test_resuming_a_begun_finish_without_one_in_the_config_is_refused(tmp_path: Path) -> None:
    """A state whose finish had begun, resumed under a config with no [finish]: a clear refusal, not a traceback."""
    train(from_dict(tiny_run(tmp_path, steps=12, curriculum_steps=4, finish_steps=4)), progress=False, stop_after=10)
    with pytest.raises(ValueError, match=r"the run has no finish phase to begin at step 8 \(phases: curriculum, full\)"):
        train(from_dict(tiny_run(tmp_path, steps=12, curriculum_steps=4)), resume=True, progress=False)


def test_a_run_behind_the_pace_begins_its_finish_by_the_clock() -> None:
    run = from_dict({"train": {"steps": 1010, "warmup_steps": 10, "max_minutes": 10.0}, "finish": {"steps": 200}})
    item = Encoded(ids=[1, 2, 3], targets=[False, True, True])
    source = BatchSource([Phase("full", 0, [item] * 4), Phase("finish", None, [item] * 4)], batch_size=4, seed=0)
    assert next_phase(run, source, [], step=809, seconds=0.0) is None
    assert next_phase(run, source, [], step=810, seconds=0.0) == (
        "finish", "the finish begins at step 810, 200 scheduled steps from the end")
    # step 100 at 81% of the time limit is scheduled as step 818: the finish's last 200 steps have begun
    assert next_phase(run, source, [], step=100, seconds=486.0) == (
        "finish", "the finish begins at step 100, 192 scheduled steps from the end")
    source.begin("finish", 100)
    assert next_phase(run, source, [], step=900, seconds=0.0) is None  # begun once


def test_a_finish_as_long_as_the_run_or_naming_an_unknown_intent_is_refused() -> None:
    base = {"train": {"steps": 1000}}
    assert from_dict(base | {"finish": {"steps": 999}}).finish.steps == 999
    with pytest.raises(ValueError, match=r"\[finish\] steps \(1000\) must be under \[train\] steps \(1000\)"):
        from_dict(base | {"finish": {"steps": 1000}})
    with pytest.raises(ValueError, match=r"\[finish\] unknown intents weather"):
        from_dict(base | {"finish": {"steps": 10, "intent_weights": {"weather": 2.0}}})


def test_a_curriculum_without_intents_is_refused() -> None:
    with pytest.raises(ValueError, match=r"\[curriculum\] steps needs intents"):
        from_dict({"curriculum": {"steps": 100}})
    with pytest.raises(ValueError, match=r"candidates must be >= 1, and more than one needs steps"):
        from_dict({"curriculum": {"intents": ["repeat"], "candidates": 2}})
    with pytest.raises(ValueError, match=r"until_loss needs steps"):
        from_dict({"curriculum": {"intents": ["repeat"], "until_loss": 1.0}})
    with pytest.raises(ValueError, match=r"loss_window >= 1"):
        from_dict({"curriculum": {"intents": ["repeat"], "steps": 9, "loss_window": 0}})


def test_the_curriculum_ends_on_its_windowed_loss_or_at_its_most_steps() -> None:
    curriculum = CurriculumConfig(intents=["repeat"], steps=6, until_loss=1.0, loss_window=3)
    assert curriculum_over(curriculum, [0.1, 0.2], 2) is None  # the window is not full yet
    assert curriculum_over(curriculum, [2.0, 1.5, 1.2, 1.1], 4) is None
    assert "most steps, 6" in (curriculum_over(curriculum, [2.0] * 6, 6) or "")
    assert "0.80 < 1.0" in (curriculum_over(curriculum, [2.0, 0.8, 0.8, 0.8], 4) or "")
    fixed = CurriculumConfig(intents=["repeat"], steps=6)
    assert curriculum_over(fixed, [0.0] * 5, 5) is None
