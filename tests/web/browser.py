"""Headless Chromium for the page tests, with every flag that keeps WebRTC on loopback (WEBRTC_TESTING.md).

Debian's chromium is driven by Playwright (never ``playwright install``); the fake microphone plays a
48 kHz 16-bit WAV once. Shared by the page tests and the transport benchmark.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"

# Playwright passes its own --disable-features list and Chromium honours only the last such flag, so the
# list is repeated here with the one feature that hides local addresses behind mDNS names.
_PLAYWRIGHT_DISABLED = (
    "AvoidUnnecessaryBeforeUnloadCheckSync,DestroyProfileOnBrowserClose,HttpsUpgrades,"
    "HttpsFirstBalancedModeAutoEnable,LensOverlay,MediaRouter,PaintHolding,ThirdPartyStoragePartitioning,"
    "AvoidCorsURLLoaderRestartOnRedirect,TcpPortRandomizationWin,OptimizationHints,"
    "NetworkTimeServiceQuerying,AimEnabled,PreconnectToSearch"
)


def chromium_args(mic_wav: Path) -> list[str]:
    """Playwright's ``launch`` gives the browser a fresh temporary profile of its own."""
    return [
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--disable-features={_PLAYWRIGHT_DISABLED},WebRtcHideLocalIpsWithMdns",
        "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
        "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={mic_wav}%noloop",
        "--autoplay-policy=no-user-gesture-required",
    ]


def have_chromium() -> bool:
    return Path(CHROMIUM).exists()


@asynccontextmanager
async def chromium_page(mic_wav: Path) -> AsyncIterator:
    """A fresh headless Chromium page whose microphone plays ``mic_wav``."""
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=chromium_args(mic_wav))
        try:
            yield await browser.new_page()
        finally:
            await browser.close()
