"""How well a checkpoint copies what it heard, measured apart from everything else it has to learn.

Every tool argument, every spoken tool result and every "say that again" is a copy of tokens the model
saw earlier in the context, and copying is where the demo checkpoint falls short. This probe scores a
checkpoint teacher-forced on held-out "repeat" dialogues (say back a phrase of made-up words and numbers):
the fraction of the phrase's tokens in the reply (spaces left out: the reply's wording around the phrase is
template, not copying) it predicts right when masked, with the whole reply masked (what the first denoising
pass faces) and with training's mix of masking rates (t ~ U(0.05, 1) per block, so often most neighbours
are visible and copying by induction suffices).

`--train STEPS` first trains a fresh model of the config's shape on repeats alone: a few minutes that say
whether a change to the model, the objective or the optimiser lets copying emerge at all, before spending
a 27-minute full run on it.

    python -m dlm.train.copy_probe                       # the shipped checkpoint
    python -m dlm.train.copy_probe --train 600 --out runs/copy_probe
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from dlm.cli import DEMO_CHECKPOINT
from dlm.cli_args import ArgumentParser, at_least_one
from dlm.engine import Engine
from dlm.train.config import load_run_config
from dlm.train.data import generate
from dlm.train.encode import DialogueEncoder
from dlm.train.objective import make_batch, masked_logits
from dlm.train.tokenizer import PAD, SPACE
from dlm.train.train import train

PROBE_INTENT = "repeat"
MASK_EPS = {"whole reply masked": 0.999, "training mix": 0.05}  # make_batch draws t ~ U(eps, 1)


@torch.no_grad()
def copy_accuracy(model_dir: str | Path, dialogues: int = 100) -> dict[str, float]:
    """Teacher-forced accuracy on the masked copies of the heard phrase in held-out repeat dialogues, per
    masking mix, in blocks of the checkpoint's own default size."""
    engine = Engine.from_dir(model_dir)
    model, tokenizer = engine.model.float(), engine.tokenizer.backend
    encoder = DialogueEncoder(tokenizer)
    space = tokenizer.token_to_id(SPACE)
    examples = generate("heldout", dialogues, seed=1, intents=[PROBE_INTENT])
    encoded = [encoder.encode(e) for e in examples]
    copies = [copy_positions(item.ids, tokenizer.encode(e.facts[0]).ids, space)
              for e, item in zip(examples, encoded, strict=True)]
    scores = {}
    for name, eps in MASK_EPS.items():
        right = total = 0
        for seed, (item, copied) in enumerate(zip(encoded, copies, strict=True)):
            batch = make_batch([item], model.cfg.block_size, model.cfg.mask_token_id, tokenizer.token_to_id(PAD),
                               eps=eps, inverse_t=False, generator=torch.Generator().manual_seed(seed))
            predicted = masked_logits(model, batch).argmax(-1)
            scored = torch.isin(batch.positions[batch.loss_index[:, 0], batch.loss_index[:, 1]], copied)
            right += int(((predicted == batch.labels) & scored).sum())
            total += int(scored.sum())
        scores[name] = right / max(total, 1)
    return scores


def copy_positions(ids: list[int], phrase: list[int], space: int | None) -> torch.Tensor:
    """Positions of the phrase's last occurrence in the dialogue (the reply's copy of it), spaces left out.

    Spaces and digits are tokens of their own, so the phrase has the same ids in the request and the reply."""
    for start in range(len(ids) - len(phrase), -1, -1):
        if ids[start:start + len(phrase)] == phrase:
            return torch.tensor([start + k for k, token in enumerate(phrase) if token != space], dtype=torch.long)
    raise ValueError("the reply does not repeat the heard phrase token for token")


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(prog="python -m dlm.train.copy_probe", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=str(DEMO_CHECKPOINT), help="checkpoint to score (without --train)")
    parser.add_argument("--train", type=int, metavar="STEPS", help="first train a fresh model on repeats only")
    parser.add_argument("--config", default="configs/demo.toml", help="model shape and optimiser for --train")
    parser.add_argument("--out", default="runs/copy_probe", help="where --train writes its checkpoint")
    parser.add_argument("--examples", type=at_least_one, default=8000, help="training dialogues for --train")
    parser.add_argument("--dialogues", type=at_least_one, default=100, help="held-out dialogues to score")
    args = parser.parse_args(argv)
    model_dir = args.model
    if args.train is not None:
        run = load_run_config(args.config)
        run.data.intents, run.data.train_examples = [PROBE_INTENT], args.examples
        run.curriculum.steps = run.finish.steps = 0  # the whole run is on repeats already
        run.train.steps, run.train.out_dir = args.train, f"{args.out}/checkpoint"
        run.train.state_dir = f"{args.out}/state"
        result = train(run)
        print(f"trained {result.steps} steps on '{PROBE_INTENT}' in {result.seconds / 60:.1f} min")
        model_dir = run.train.out_dir
    for name, accuracy in copy_accuracy(model_dir, args.dialogues).items():
        print(f"copy accuracy, {name:18} {accuracy:6.1%}")


if __name__ == "__main__":
    main()
