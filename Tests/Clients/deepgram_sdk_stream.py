#!/usr/bin/env python3
"""Streams a WAV file to a Deepgram-compatible server with Deepgram's official Python SDK.

usage: deepgram_sdk_stream.py URL WAV [--key KEY] [--finalize] [--pace SECONDS_PER_100MS]
                              [--lead-silence SECONDS] [--trail-silence SECONDS]
                              [--clients N [--probe-extra]]

URL is the server's base (ws://127.0.0.1:PORT). The file's samples (after its 44-byte header) go
out in 100 ms frames at real time (or at --pace), then CloseStream; with --finalize a Finalize
goes first. Reads every message until the server closes. Prints one JSON object: finals (each
{transcript, from_finalize, speech_final, start, duration, words, latency: seconds from sending
the final's last audio to receiving it}), interim count, metadata
seen, the message types, the close code, errors. With --clients N, N clients stream the file at
once and the object is {"clients": [...]}; with --probe-extra, once all N are open one more
tries to connect and its outcome is "extra" (e.g. {"status": 429}).
"""
import argparse
import json
import math
import sys
import threading
import time

from deepgram import DeepgramClient
from deepgram.core.events import EventType
from deepgram.environment import DeepgramClientEnvironment


def make_client(arguments):
    http = arguments.url.replace("ws://", "http://").replace("wss://", "https://")
    environment = DeepgramClientEnvironment(
        base=http, production=arguments.url, agent=arguments.url, agent_rest=http)
    return DeepgramClient(api_key=arguments.key, environment=environment)


def connect(client):
    return client.listen.v1.connect(
        model="nova-3", language="en-US", encoding="linear16", sample_rate=16000, channels=1,
        interim_results="true", punctuate="true", smart_format="true", vad_events="true",
        utterance_end_ms="1000",
    )


def stream(arguments, audio, opened=None):
    """One client streaming `audio`; `opened` (a barrier) is waited on once its socket is open."""
    client = make_client(arguments)

    summary = {"finals": [], "interims": 0, "metadata": 0, "types": [], "close": None, "errors": []}
    lock = threading.Lock()
    # When the first frame left: frame i (stream time i/10 s to (i+1)/10 s) left at started + i * pace.
    clock = {"started": None}

    def on_message(message):
        kind = getattr(message, "type", None)
        with lock:
            summary["types"].append(kind)
            if kind == "Results":
                alternative = message.channel.alternatives[0]
                if message.is_final:
                    # Seconds from sending the final's last audio to receiving the final.
                    latency = None
                    if clock["started"] is not None:
                        frame = max(0, math.ceil(round((message.start + message.duration) * 10, 6)) - 1)
                        sent = clock["started"] + frame * arguments.pace
                        latency = time.monotonic() - sent
                    summary["finals"].append({
                        "latency": latency,
                        "transcript": alternative.transcript,
                        "from_finalize": bool(message.from_finalize),
                        "speech_final": bool(message.speech_final),
                        "start": message.start,
                        "duration": message.duration,
                        "words": len(alternative.words),
                    })
                else:
                    summary["interims"] += 1
            elif kind == "Metadata":
                summary["metadata"] += 1
                summary["model"] = getattr(message, "model_info", None)

    def on_error(error):
        with lock:
            summary["errors"].append(str(error))

    try:
        with connect(client) as socket:
            if opened is not None:
                try:
                    opened.wait(timeout=30)
                except threading.BrokenBarrierError:
                    pass  # another client could not connect: stream anyway
            socket.on(EventType.MESSAGE, on_message)
            socket.on(EventType.ERROR, on_error)
            listener = threading.Thread(target=socket.start_listening, daemon=True)
            listener.start()
            frame = 3200  # 100 ms of 16 kHz 16-bit mono
            started = time.monotonic()
            clock["started"] = started
            for index, offset in enumerate(range(0, len(audio), frame)):
                socket.send_media(audio[offset:offset + frame])
                # Real time: each frame leaves when its audio would have been spoken.
                delay = started + (index + 1) * arguments.pace - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            if arguments.finalize:
                socket.send_finalize()
            socket.send_close_stream()
            listener.join(timeout=60)
            close = getattr(socket._websocket, "close_code", None)
            summary["close"] = close
    except Exception as error:  # a refused handshake, a dropped connection
        summary["errors"].append(f"{type(error).__name__}: {error}")
        if opened is not None:
            opened.abort()
    summary["model"] = str(summary.get("model"))
    return summary


def probe(arguments):
    """Tries one more connection; returns its HTTP status if refused."""
    try:
        with connect(make_client(arguments)):
            return {"status": 101}
    except Exception as error:
        # The SDK wraps some refusals in ApiError(status_code); others come from `websockets`
        # as InvalidStatus with the HTTP response.
        status = getattr(error, "status_code", None) or getattr(getattr(error, "response", None), "status_code", None)
        return {"status": status, "error": f"{type(error).__name__}: {error}"}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("wav")
    parser.add_argument("--key", default="no-key-needed-on-loopback")
    parser.add_argument("--finalize", action="store_true")
    parser.add_argument("--pace", type=float, default=0.1)
    parser.add_argument("--lead-silence", type=float, default=0.0)
    parser.add_argument("--trail-silence", type=float, default=0.0)
    parser.add_argument("--clients", type=int, default=0)
    parser.add_argument("--probe-extra", action="store_true")
    arguments = parser.parse_args()

    with open(arguments.wav, "rb") as file:
        audio = file.read()[44:]
    audio = bytes(int(arguments.lead_silence * 32000)) + audio + bytes(int(arguments.trail_silence * 32000))

    if arguments.clients == 0:
        print(json.dumps(stream(arguments, audio)))
        return 0
    parties = arguments.clients + (1 if arguments.probe_extra else 0)
    opened = threading.Barrier(parties)
    results = [None] * arguments.clients
    extra = {}

    def run(index):
        results[index] = stream(arguments, audio, opened)

    threads = [threading.Thread(target=run, args=(index,)) for index in range(arguments.clients)]
    for thread in threads:
        thread.start()
    if arguments.probe_extra:
        try:
            opened.wait(timeout=30)
            extra = probe(arguments)
        except threading.BrokenBarrierError:
            extra = {"status": None, "error": "not all clients connected"}
    for thread in threads:
        thread.join()
    print(json.dumps({"clients": results, "extra": extra}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
