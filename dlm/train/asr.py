"""Make clean request text look like what speech recognition delivers: lower case, few marks, fillers,
the odd misheard word. Value-bearing words (numbers, names, units) are never altered."""

from __future__ import annotations

import random
import re

FILLERS = ["um", "uh", "so", "okay", "hey", "um so", "uh hey", "well", "hmm"]
# Words people wrap around any request. Applied to every intent, they teach the model that the request's
# content words pick the tool, not the wrapper around them, so an unseen phrasing still lands.
OPENERS = ["quick question", "excuse me", "alright", "assistant", "okay so", "sorry", "hey there", "listen",
           "so um", "right"]
CLOSERS = ["please", "for me", "thanks", "right now", "now", "real quick", "if you can", "okay", "thank you",
           "again"]
MISHEARD = {
    "capital": ["capitol"], "what's": ["whats", "what is", "what"], "weather": ["whether"],
    "the": ["a", "the the"], "you": ["ya"], "please": ["pleas"], "can": ["could", "can"],
    "tell": ["tel"], "how": ["how"], "is": ["s", "is"], "timer": ["time her", "timer"],
}


def asr_noise(text: str, rng: random.Random) -> str:
    """One recognised version of `text`."""
    text = re.sub(r"[?!.,;]", "", text.lower())
    words = text.split()
    out = []
    for word in words:
        if word in MISHEARD and rng.random() < 0.06:
            word = rng.choice(MISHEARD[word])
        out.append(word)
        if rng.random() < 0.03:
            out.append(rng.choice(["um", "uh"]))
    if rng.random() < 0.15:
        out.append(rng.choice(CLOSERS))
    if rng.random() < 0.1:
        out.insert(0, rng.choice(OPENERS))
    if rng.random() < 0.3:
        out.insert(0, rng.choice(FILLERS))
    return " ".join(out)
