"""A tiny OpenAI-compatible chat upstream for the benchmarks (standard library, asyncio).

POST .../chat/completions answers at once with a fixed completion, or, with "stream": true, sends
`--chunks` SSE chunks `--interval` seconds apart, then a usage chunk when the request asked for it
(stream_options.include_usage) and `data: [DONE]`. One event loop holds thousands of open streams,
so it never is the limit when we count the streams a gateway instance can hold. Like a provider's
API, a stream is sent chunked on a connection kept alive for the next request (unless the request
said `Connection: close`), so a gateway that keeps its upstream connections reuses them.

    python bench/fake_upstream.py --port 18202 --chunks 20 --interval 0.5

It binds 127.0.0.1 only and stops on SIGTERM/SIGINT.
"""
import argparse
import asyncio
import json
import signal
import time

COMPLETION = {
    "id": "chatcmpl-bench",
    "object": "chat.completion",
    "created": 1700000000,
    "model": "bench-upstream",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello from the fake upstream."},
                 "logprobs": None, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 12, "completion_tokens": 6, "total_tokens": 18},
    "system_fingerprint": None,
}
MAX_BODY = 1 << 20


def _framed(data: bytes) -> bytes:
    """One chunk of a chunked HTTP/1.1 body."""
    return b"%x\r\n%s\r\n" % (len(data), data)


def _chunk(delta: dict, finish=None, usage=None) -> bytes:
    body = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": int(time.time()),
            "model": "bench-upstream",
            "choices": [] if usage else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
    if usage:
        body["usage"] = usage
    return b"data: " + json.dumps(body).encode() + b"\n\n"


class Upstream:
    def __init__(self, chunks: int, interval: float):
        self.chunks = chunks
        self.interval = interval
        self.open_streams = 0
        self.peak_streams = 0
        self.connections = 0  # accepted since the last reset

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.connections += 1
        try:
            while await self._one_request(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    async def _one_request(self, reader, writer) -> bool:
        """Serve one request on a keep-alive connection; False when the connection should end."""
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = (lines[0].split(" ", 2) + ["", ""])[:3]
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = min(int(headers.get("content-length") or 0), MAX_BODY)
        body = await reader.readexactly(length) if length else b""
        if method == "GET" and path.rstrip("/").endswith("/stats/reset"):
            self.peak_streams = self.open_streams  # the next burst's peak, on the same connections
            self.connections = 0
            path = "/stats"
        if method == "GET" and path.rstrip("/").endswith("/stats"):
            payload = json.dumps({"open_streams": self.open_streams, "peak_streams": self.peak_streams,
                                  "connections": self.connections}).encode()
            await self._respond(writer, 200, payload)
            return True
        if method != "POST" or not path.rstrip("/").endswith("/chat/completions"):
            await self._respond(writer, 404, b'{"error": {"message": "not found", "type": "invalid_request_error"}}')
            return True
        try:
            request = json.loads(body or b"{}")
        except ValueError:
            request = {}
        if not request.get("stream"):
            await self._respond(writer, 200, json.dumps(COMPLETION).encode())
            return True
        await self._stream(writer, request)
        return headers.get("connection", "").lower() != "close"

    async def _respond(self, writer, status: int, payload: bytes):
        writer.write(b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                     % (status, b"OK" if status == 200 else b"Not Found", len(payload)) + payload)
        await writer.drain()

    async def _stream(self, writer, request: dict):
        self.open_streams += 1
        self.peak_streams = max(self.peak_streams, self.open_streams)
        try:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n")
            writer.write(_framed(_chunk({"role": "assistant", "content": ""})))
            await writer.drain()
            for index in range(self.chunks):
                await asyncio.sleep(self.interval)
                writer.write(_framed(_chunk({"content": f"piece {index} "})))
                await writer.drain()
            writer.write(_framed(_chunk({}, finish="stop")))
            if (request.get("stream_options") or {}).get("include_usage"):
                writer.write(_framed(_chunk({}, usage={"prompt_tokens": 12, "completion_tokens": self.chunks,
                                                       "total_tokens": 12 + self.chunks})))
            writer.write(_framed(b"data: [DONE]\n\n") + b"0\r\n\r\n")
            await writer.drain()
        finally:
            self.open_streams -= 1


async def main(port: int, chunks: int, interval: float):
    upstream = Upstream(chunks, interval)
    server = await asyncio.start_server(upstream.handle, "127.0.0.1", port, backlog=4096)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=18202)
    parser.add_argument("--chunks", type=int, default=20, help="content chunks per stream")
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between chunks")
    args = parser.parse_args()
    asyncio.run(main(args.port, args.chunks, args.interval))
