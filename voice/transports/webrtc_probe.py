"""Measures WebRTC one-way audio latency on loopback, with aiortc's default jitter buffer and ours.

Two in-process peers: the sender's :class:`PacedAudioTrack` plays short pulses, the receiver reads
decoded frames as soon as aiortc delivers them. Latency is the time from the pulse leaving the sender's
track to its first decoded frame at the receiver: RTP, Opus and the receive jitter buffer, the part the
:class:`JitterConfig` changes. ``python -m voice.transports.webrtc_probe`` prints both;
``latency_bench`` calls :func:`compare`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from dataclasses import asdict, dataclass

import numpy as np
from aiortc import RTCConfiguration, RTCPeerConnection

from dlm.cli_args import at_least_one
from voice.transports.webrtc import (
    AIORTC_DEFAULT_JITTER,
    WEBRTC_RATE,
    JitterConfig,
    PacedAudioTrack,
    offer_loopback_candidates,
    to_mono,
    tune_jitter_buffer,
)

PULSE_MS = 60
THRESHOLD = 2000


@dataclass(frozen=True)
class OneWayLatency:
    jitter: str
    samples: int
    median_ms: float
    p95_ms: float


async def measure(jitter: JitterConfig | None, pulses: int = 12, interval_s: float = 0.3) -> list[float]:
    """One-way latency in ms of each pulse; ``jitter=None`` keeps aiortc's default buffer."""
    offer_loopback_candidates(loopback_only=True)
    sent_at: dict[int, float] = {}
    arrived: list[float] = []

    def on_played(turn: int, samples: int) -> None:
        sent_at.setdefault(turn, time.monotonic())

    track = PacedAudioTrack(on_played=on_played)
    sender = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    receiver = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    sender.addTrack(track)

    async def listen(remote) -> None:
        loud = False
        while True:
            peak = int(np.abs(to_mono(await remote.recv())).max())
            if peak > THRESHOLD and not loud:
                arrived.append(time.monotonic())
            loud = peak > THRESHOLD

    tasks: list[asyncio.Task[None]] = []
    receiver.on("track", lambda remote: tasks.append(asyncio.create_task(listen(remote))))
    try:
        await sender.setLocalDescription(await sender.createOffer())
        await receiver.setRemoteDescription(sender.localDescription)
        if jitter is not None:
            tune_jitter_buffer(receiver.getTransceivers()[0].receiver, jitter)
        await receiver.setLocalDescription(await receiver.createAnswer())
        await sender.setRemoteDescription(receiver.localDescription)
        await asyncio.sleep(1.0)  # connect and let both ends settle
        n = PULSE_MS * WEBRTC_RATE // 1000
        pulse = (12000 * np.sin(2 * np.pi * 440 * np.arange(n) / WEBRTC_RATE)).astype(np.int16)
        for i in range(pulses):
            track.write(i, pulse, WEBRTC_RATE)
            await asyncio.sleep(interval_s)
    finally:
        for task in tasks:
            task.cancel()
        track.stop()
        await sender.close()
        await receiver.close()
    return [1000 * (a - s) for s, a in zip((sent_at[i] for i in sorted(sent_at)), arrived, strict=False)]


def summarise(name: str, latencies: list[float]) -> OneWayLatency:
    ordered = sorted(latencies)
    return OneWayLatency(name, len(ordered), round(statistics.median(ordered), 1),
                         round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 1))


async def compare(tuned: JitterConfig | None = None, pulses: int = 12) -> list[OneWayLatency]:
    """Default and tuned jitter buffer in the same run."""
    tuned = tuned or JitterConfig()
    return [summarise(f"aiortc default {AIORTC_DEFAULT_JITTER}", await measure(None, pulses)),
            summarise(f"tuned {tuned}", await measure(tuned, pulses))]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m voice.transports.webrtc_probe", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pulses", type=at_least_one, default=12, help="pulses sent through each buffer")
    args = parser.parse_args(argv)
    for result in asyncio.run(compare(pulses=args.pulses)):
        print(json.dumps(asdict(result)))


if __name__ == "__main__":
    main()
