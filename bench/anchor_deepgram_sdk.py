"""The benchmark anchor: Deepgram's own Python SDK streaming raw audio from stdin (parec).

usage: anchor_deepgram_sdk.py WS_BASE_URL API_KEY SECONDS
Streams 16 kHz mono s16le from stdin for SECONDS, then Finalize + CloseStream, and prints the
number of results received. Run by `make bench` in a virtual environment with deepgram-sdk.
"""
import sys
import threading
import time

from deepgram import DeepgramClient
from deepgram.core.events import EventType
from deepgram.environment import DeepgramClientEnvironment


def main():
    base, key, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    environment = DeepgramClientEnvironment(
        base=base.replace("ws", "http", 1), production=base, agent=base, agent_rest=base.replace("ws", "http", 1))
    client = DeepgramClient(api_key=key, environment=environment)
    results = []
    with client.listen.v1.connect(
        model="nova-3", encoding="linear16", sample_rate=16000, channels=1, interim_results=True
    ) as connection:
        connection.on(EventType.MESSAGE, results.append)
        listener = threading.Thread(target=connection.start_listening, daemon=True)
        listener.start()
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            chunk = sys.stdin.buffer.read(3200)  # 100 ms, as sttd sends
            if not chunk:
                break
            connection.send_media(chunk)
        connection.send_finalize()
        connection.send_close_stream()
        listener.join(timeout=10)
    print(len(results))


if __name__ == "__main__":
    main()
