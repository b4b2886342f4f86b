"""Training of the demo checkpoint: synthetic dialogues, tokenizer, block-diffusion objective, loop."""
