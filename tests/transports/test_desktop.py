"""The desktop transport on a machine with no sound card: it must say so, not crash."""

from __future__ import annotations

import argparse

import pytest

from voice.transports.desktop import AudioDeviceError, load_sounddevice, main, pick_devices


def test_no_audio_device_is_a_clear_error() -> None:
    sd = load_sounddevice()
    if len(sd.query_devices()):
        pytest.skip("this machine has audio devices")
    with pytest.raises(AudioDeviceError, match="no audio devices found"):
        main(argparse.Namespace(list_devices=False, input_device=None, output_device=None))
    with pytest.raises(AudioDeviceError, match="no audio devices found"):
        pick_devices(sd, 0, 0)


def test_list_devices_says_when_there_are_none(capsys) -> None:
    assert main(argparse.Namespace(list_devices=True)) == 0
    listing = capsys.readouterr().out
    assert listing.strip()
    if not len(load_sounddevice().query_devices()):
        assert "no audio devices found" in listing
