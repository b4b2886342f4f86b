"""Transports put a :class:`voice.events.Conversation` where its callers are.

Each one only turns a wire format into ``push_audio``/``commit_turn``/... calls and pipeline events back
into its wire format: WebRTC (browsers), the OpenAI Realtime websocket (programs), Twilio-style Media
Streams (phones) and the local sound card (desktop). ``voice.server`` mounts them all on one aiohttp app.
"""
