"""``python -m voice desktop``: talk to the assistant through this machine's microphone and speaker.

sounddevice (PortAudio) runs one input and one output stream at 48 kHz in 20 ms blocks: microphone
blocks go to the conversation, the speaker pulls from a :class:`Playout` (silence when idle, cleared on
barge-in). Without PortAudio or without a device it stops with a message that says what to do.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from typing import Any

import numpy as np

from voice.events import AudioCleared, AudioOut, ReplyTextDelta, ResponseDone, TranscriptCompleted
from voice.transports.playout import Playout

DEVICE_RATE = 48000
BLOCK = 960  # 20 ms


class AudioDeviceError(SystemExit):
    """No usable sound card (or no PortAudio): the message says how to get one or pick one."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input-device", type=int, metavar="N", help="microphone (index from --list-devices)")
    parser.add_argument("--output-device", type=int, metavar="N", help="speaker (index from --list-devices)")
    parser.add_argument("--list-devices", action="store_true", help="print the audio devices and exit")


def load_sounddevice() -> Any:
    try:
        import sounddevice
    except OSError as err:  # the module is there but libportaudio is not
        raise AudioDeviceError(
            f"PortAudio is not available ({err}); install it, e.g. `apt-get install libportaudio2`") from None
    return sounddevice


def pick_devices(sd: Any, input_device: int | None, output_device: int | None) -> tuple[int, int]:
    """The devices to use, checked to exist and to have the right direction."""
    devices = list(sd.query_devices())
    if not devices:
        raise AudioDeviceError("no audio devices found on this machine (no microphone and no speaker)")

    def choose(index: int | None, kind: str, channels_key: str) -> int:
        if index is None:
            index = sd.default.device[0 if kind == "input" else 1]
            if index is None or index < 0:
                raise AudioDeviceError(f"no default {kind} device; pick one with --{kind}-device N "
                                       "(see --list-devices)")
        if not 0 <= index < len(devices):
            raise AudioDeviceError(f"--{kind}-device {index} does not exist; there are {len(devices)} devices "
                                   "(see --list-devices)")
        if devices[index][channels_key] < 1:
            raise AudioDeviceError(f"device {index} ({devices[index]['name']}) has no {kind} channels")
        return index

    return choose(input_device, "input", "max_input_channels"), choose(output_device, "output",
                                                                      "max_output_channels")


async def talk(conversation: Any, sd: Any, input_device: int, output_device: int) -> None:
    """Run one conversation on the sound card until cancelled (Ctrl-C)."""
    loop = asyncio.get_running_loop()
    mic: asyncio.Queue[np.ndarray] = asyncio.Queue(maxsize=500)

    def on_played(turn: int, samples: int) -> None:
        loop.call_soon_threadsafe(conversation.played, turn, samples)

    playout = Playout(DEVICE_RATE, on_played)

    def on_mic(indata: np.ndarray, frames: int, time_info: Any, status: Any) -> None:
        block = indata[:, 0].copy()
        loop.call_soon_threadsafe(lambda: mic.full() or mic.put_nowait(block))

    def on_speaker(outdata: np.ndarray, frames: int, time_info: Any, status: Any) -> None:
        outdata[:, 0] = playout.read(frames)

    async def feed() -> None:
        while True:
            await conversation.push_audio(await mic.get(), DEVICE_RATE)

    async def show() -> None:
        async for ev in conversation.events():
            if isinstance(ev, AudioOut):
                playout.write(ev.turn_id, ev.pcm, ev.sample_rate)
            elif isinstance(ev, AudioCleared):
                playout.clear()
            elif isinstance(ev, TranscriptCompleted) and ev.text:  # an empty one was noise: no reply follows
                print(f"\nyou: {ev.text}\nassistant: ", end="", flush=True)
            elif isinstance(ev, ReplyTextDelta):
                print(ev.text, end="", flush=True)
            elif isinstance(ev, ResponseDone):
                v2v = ev.trace.get("voice_to_voice_ms")
                print(f"   [{'interrupted' if ev.cancelled else f'{v2v} ms voice-to-voice'}]", flush=True)

    streams = (
        sd.InputStream(device=input_device, samplerate=DEVICE_RATE, channels=1, dtype="int16",
                       blocksize=BLOCK, callback=on_mic),
        sd.OutputStream(device=output_device, samplerate=DEVICE_RATE, channels=1, dtype="int16",
                        blocksize=BLOCK, callback=on_speaker),
    )
    with streams[0], streams[1]:
        tasks = [asyncio.create_task(feed()), asyncio.create_task(show())]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()


def main(args: argparse.Namespace) -> int:
    sd = load_sounddevice()
    if getattr(args, "list_devices", False):
        print(sd.query_devices() if len(sd.query_devices()) else "no audio devices found on this machine")
        return 0
    input_device, output_device = pick_devices(sd, getattr(args, "input_device", None),
                                               getattr(args, "output_device", None))
    from voice.config import load_config

    config = load_config(getattr(args, "config", "default"))
    print("loading models ...", file=sys.stderr, flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_run(config, sd, input_device, output_device))
    return 0


async def _run(config: Any, sd: Any, input_device: int, output_device: int) -> None:
    from voice.pipeline import VoicePipeline
    from voice.resources import Resources

    resources = await Resources.load(config)
    conversation = VoicePipeline(resources)
    print("listening; speak (Ctrl-C quits)", file=sys.stderr, flush=True)
    try:
        await talk(conversation, sd, input_device, output_device)
    finally:
        await conversation.close()
        resources.close()
