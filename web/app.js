// Browser client: WebRTC to POST /v1/realtime/calls, Realtime events on the "oai-events" data channel.
// Plain JS, no build step. Query flags: ?raw=1 turns the browser's audio processing off (echo
// cancellation, noise suppression, gain control), ?record=1 records the assistant audio for tests,
// ?autoconnect=1 calls on load. window.voice exposes the page state to tests and benchmarks.
"use strict";

const params = new URLSearchParams(location.search);
const $ = (id) => document.getElementById(id);
const STAGES = [["asr", "#60a5fa"], ["lm", "#f59e0b"], ["tts", "#10b981"], ["output", "#a78bfa"]];
const CHART_TURNS = 12;

const voice = {
  state: "idle",
  events: [],          // every server event type, in order
  turns: [],           // {role, text, tentative, el}
  traces: [],          // response.done traces
  errors: [],
  audioOnsets: [],     // performance.now() when assistant audio starts after a silence
  lastLoudAt: null,    // performance.now() of the latest audible assistant audio
  micSpeechEnds: [],   // performance.now() when the microphone fell silent after speech
  micLevel: 0,
  recording: null,     // Promise<{mime, base64}> after stop() with ?record=1
};
window.voice = voice;

let pc = null, channel = null, micStream = null, callUrl = null, recorder = null, recorded = [];
let audioCtx = null, timers = [];
let userTurn = null, assistantTurn = null;
let callId = 0;  // bumped by each connect and hang-up: a connect hung up on stops at its next step

function setState(state, detail) {
  voice.state = state;
  $("status").textContent = detail ? `${state}: ${detail}` : state;
  const live = state === "connected" || state === "connecting";
  $("call").textContent = live ? "Hang up" : "Connect";
  $("call").classList.toggle("live", live);
}

function authHeaders() {
  const token = $("token").value.trim() || localStorage.getItem("voiceToken") || "";
  if ($("token").value.trim()) localStorage.setItem("voiceToken", token);
  return token ? { Authorization: `Bearer ${token}` } : {};
}

// ------------------------------------------------------------------------------------------ turns

function addTurn(role) {
  const el = document.createElement("div");
  el.className = `turn ${role}`;
  el.innerHTML = `<span class="who">${role === "user" ? "you" : role}</span>` +
                 `<span class="text"></span><span class="tentative"></span>`;
  $("turns").append(el);
  el.scrollIntoView({ block: "end" });
  const turn = { role, text: "", tentative: "", el };
  voice.turns.push(turn);
  return turn;
}

function render(turn) {
  turn.el.querySelector(".text").textContent = turn.text;
  turn.el.querySelector(".tentative").textContent = turn.tentative ? ` ${turn.tentative}` : "";
}

function onEvent(ev) {
  voice.events.push(ev.type);
  switch (ev.type) {
    case "input_audio_buffer.speech_started":
      userTurn = addTurn("user");
      break;
    case "conversation.item.input_audio_transcription.delta":
      userTurn = userTurn || addTurn("user");
      userTurn.text += ev.delta || "";
      userTurn.tentative = ev.tentative || "";
      render(userTurn);
      break;
    case "conversation.item.input_audio_transcription.completed":
      userTurn = userTurn || addTurn("user");
      userTurn.text = ev.transcript;
      userTurn.tentative = "";
      render(userTurn);
      userTurn = null;
      break;
    case "response.created":
      assistantTurn = addTurn("assistant");
      break;
    case "response.output_audio_transcript.delta":  // pieces carry their own spaces: "twel", "ve times"
      assistantTurn = assistantTurn || addTurn("assistant");
      assistantTurn.text += ev.delta || "";
      render(assistantTurn);
      break;
    case "response.output_audio_transcript.done":  // what was said: less than the deltas after a barge-in
      if (assistantTurn) {
        assistantTurn.text = ev.transcript;
        render(assistantTurn);
      }
      break;
    case "output_audio_buffer.cleared":
      if (assistantTurn) assistantTurn.el.classList.add("interrupted");
      break;
    case "response.done":
      if (assistantTurn && ev.response && ev.response.status === "cancelled") {
        assistantTurn.el.classList.add("interrupted");
      }
      if (ev.trace && Object.keys(ev.trace).length) addTrace(ev.trace);
      assistantTurn = null;
      break;
    case "error": {
      const message = (ev.error && ev.error.message) || "error";
      voice.errors.push(message);
      addTurn("error").el.querySelector(".text").textContent = message;
      break;
    }
  }
}

// ------------------------------------------------------------------------------------------ latency

function addTrace(trace) {
  voice.traces.push(trace);
  const d = trace.durations_ms || {};
  const row = document.createElement("tr");
  const cells = [trace.turn, d.asr, d.lm, d.tts, d.output, trace.voice_to_voice_ms];
  row.innerHTML = cells.map((v) => `<td>${v == null ? "–" : Math.round(v)}</td>`).join("");
  $("latency").querySelector("tbody").prepend(row);
  drawChart();
}

function drawChart() {
  const canvas = $("chart"), g = canvas.getContext("2d");
  const recent = voice.traces.slice(-CHART_TURNS);
  const total = (t) => t.voice_to_voice_ms || STAGES.reduce((s, [k]) => s + ((t.durations_ms || {})[k] || 0), 0);
  const top = Math.max(100, ...recent.map(total));
  const w = canvas.width, h = canvas.height, pad = 24, bar = (w - pad) / CHART_TURNS;
  g.clearRect(0, 0, w, h);
  g.fillStyle = "#6b7280";
  g.font = "10px system-ui";
  g.fillText(`${Math.round(top)} ms`, 0, 10);
  recent.forEach((t, i) => {
    let y = h - 12;
    for (const [stage, color] of STAGES) {
      const ms = (t.durations_ms || {})[stage] || 0, bh = (ms / top) * (h - 24);
      g.fillStyle = color;
      g.fillRect(pad + i * bar + 2, y - bh, bar - 4, bh);
      y -= bh;
    }
    g.fillStyle = "#6b7280";
    g.fillText(String(t.turn), pad + i * bar + 2, h - 1);
  });
  STAGES.forEach(([stage, color], i) => {
    g.fillStyle = color;
    g.fillRect(w - 60, 4 + i * 12, 8, 8);
    g.fillStyle = "#6b7280";
    g.fillText(stage, w - 48, 12 + i * 12);
  });
}

// ------------------------------------------------------------------------------------------ audio

function meter(stream, onLevel) {
  const source = audioCtx.createMediaStreamSource(stream);
  const analyser = audioCtx.createAnalyser();
  analyser.fftSize = 512;
  source.connect(analyser);
  const buf = new Float32Array(analyser.fftSize);
  timers.push(setInterval(() => {
    analyser.getFloatTimeDomainData(buf);
    let sum = 0;
    for (const x of buf) sum += x * x;
    onLevel(Math.sqrt(sum / buf.length));
  }, 10));
}

function watchRemote(stream) {
  $("remote").srcObject = stream;  // Chromium feeds remote WebRTC audio to Web Audio only while played
  let quietSince = performance.now();
  meter(stream, (rms) => {
    const now = performance.now();
    if (rms > 0.01) {
      voice.lastLoudAt = now;
      if (quietSince !== null && now - quietSince > 300) voice.audioOnsets.push(now);
      quietSince = null;
    } else if (quietSince === null) {
      quietSince = now;
    }
  });
  if (params.get("record") === "1") {
    recorder = new MediaRecorder(stream);
    recorder.ondataavailable = (e) => e.data.size && recorded.push(e.data);
    recorder.start(250);
  }
}

function tuneReceiver(receiver) {
  // Ask the browser for its smallest playout delay: this is a conversation, not a broadcast.
  try {
    if ("jitterBufferTarget" in receiver) receiver.jitterBufferTarget = 0;
    else if ("playoutDelayHint" in receiver) receiver.playoutDelayHint = 0;
  } catch (err) { console.warn("jitter buffer hint unsupported", err); }
}

function stopRecording() {
  if (!recorder) return Promise.resolve(null);
  return new Promise((resolve) => {
    recorder.onstop = async () => {
      const blob = new Blob(recorded, { type: recorder.mimeType });
      const bytes = new Uint8Array(await blob.arrayBuffer());
      let binary = "";
      for (let i = 0; i < bytes.length; i += 0x8000) binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
      resolve({ mime: recorder.mimeType, base64: btoa(binary) });
    };
    recorder.stop();
  });
}

// ------------------------------------------------------------------------------------------ call

function iceGathered(peer, timeoutMs) {
  if (peer.iceGatheringState === "complete") return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => peer.iceGatheringState === "complete" && resolve();
    peer.addEventListener("icegatheringstatechange", done);
    setTimeout(resolve, timeoutMs);  // the server needs candidates in the offer; don't wait forever
  });
}

async function connect(id) {
  setState("connecting");
  recorded = [];
  const raw = params.get("raw") === "1";
  const stream = await navigator.mediaDevices.getUserMedia({
    audio: { echoCancellation: !raw, noiseSuppression: !raw, autoGainControl: !raw, channelCount: 1 },
  });
  if (id !== callId) {  // hung up while the browser asked for the microphone
    stream.getTracks().forEach((t) => t.stop());
    return;
  }
  micStream = stream;
  audioCtx = new AudioContext();
  let micLoud = false;
  meter(micStream, (rms) => {
    voice.micLevel = rms;
    $("level").value = Math.min(1, rms * 4);
    if (micLoud && rms < 0.005) voice.micSpeechEnds.push(performance.now());
    micLoud = rms > 0.02 || (micLoud && rms >= 0.005);
  });

  const peer = pc = new RTCPeerConnection({ iceServers: [] });
  peer.addTrack(micStream.getAudioTracks()[0], micStream);
  peer.ontrack = (e) => { tuneReceiver(e.receiver); watchRemote(e.streams[0] || new MediaStream([e.track])); };
  peer.onconnectionstatechange = () => {
    if (id !== callId) return;
    if (peer.connectionState === "connected") setState("connected");
    if (peer.connectionState === "failed") hangUp("connection failed");
  };
  channel = peer.createDataChannel("oai-events");
  channel.onmessage = (m) => onEvent(JSON.parse(m.data));
  channel.onclose = () => id === callId && hangUp("the call ended");  // the server hung up or went away

  await peer.setLocalDescription(await peer.createOffer());
  await iceGathered(peer, 3000);
  if (id !== callId) return;
  const res = await fetch("/v1/realtime/calls", {
    method: "POST", body: peer.localDescription.sdp,
    headers: { "Content-Type": "application/sdp", ...authHeaders() },
  });
  if (id !== callId) {  // hung up while the server set the call up: end it there too
    if (res.ok) fetch(`${res.headers.get("Location")}/hangup`, { method: "POST", headers: authHeaders() }).catch(() => {});
    return;
  }
  if (!res.ok) {
    const body = await res.json().catch(() => ({}));
    throw new Error((body.error && body.error.message) || `server answered ${res.status}`);
  }
  callUrl = res.headers.get("Location");
  await peer.setRemoteDescription({ type: "answer", sdp: await res.text() });
}

async function hangUp(reason) {
  callId++;
  if (recorder && recorder.state !== "inactive") voice.recording = stopRecording();
  if (callUrl) fetch(`${callUrl}/hangup`, { method: "POST", headers: authHeaders() }).catch(() => {});
  timers.forEach(clearInterval);
  timers = [];
  if (pc) pc.close();
  if (micStream) micStream.getTracks().forEach((t) => t.stop());
  if (audioCtx) audioCtx.close();
  pc = channel = micStream = callUrl = audioCtx = userTurn = assistantTurn = null;
  setState("idle", reason);
}

voice.connect = () => {
  const id = ++callId;
  return connect(id).catch((err) => {
    if (id !== callId) return;  // hung up meanwhile: what failed was the call being abandoned
    voice.errors.push(String(err.message || err));
    hangUp(err.message);
  });
};
voice.hangUp = () => hangUp();
voice.stopRecording = stopRecording;
voice.playoutDelayMs = async () => {  // the browser's average jitter-buffer delay on the assistant audio
  if (!pc) return null;
  for (const s of (await pc.getStats()).values()) {
    if (s.type === "inbound-rtp" && s.kind === "audio" && s.jitterBufferEmittedCount) {
      return (1000 * s.jitterBufferDelay) / s.jitterBufferEmittedCount;
    }
  }
  return null;
};

$("call").addEventListener("click", () => (voice.state === "idle" ? voice.connect() : voice.hangUp()));
if (params.get("autoconnect") === "1") voice.connect();
