"""The upstream hop's HTTP/1.1 client (app.upstream.wire), against real loopback servers that answer with
exactly the bytes each case needs: keep-alive reuse, every body framing, and every way a backend can
break an answer."""

from __future__ import annotations

import asyncio
import shutil
import socket
import ssl
import struct
import subprocess
import time

import pytest

from app.upstream.wire import BadResponse, BrokenBody, ConnectFailed, Disconnected, StreamIdle, WirePool
from tests.support import free_port

HEADERS = {"content-type": "application/json", "authorization": "Bearer k"}


class Backend:
    """A loopback server: each request gets the next canned answer (bytes, then optionally close)."""

    def __init__(self, answers: list[tuple[bytes, bool]]) -> None:
        self.answers = answers
        self.requests: list[bytes] = []
        self.connections = 0
        self.disconnects = 0
        self.server: asyncio.Server | None = None

    async def start(self, host: str = "127.0.0.1", tls: ssl.SSLContext | None = None) -> int:
        self.server = await asyncio.start_server(self._serve, host, 0, ssl=tls)
        return self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while self.answers:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.split(b"content-length: ")[1].split(b"\r\n")[0])
                self.requests.append(head + await reader.readexactly(length))
                answer, close = self.answers.pop(0)
                writer.write(answer)
                await writer.drain()
                if close:
                    return  # the backend ends the connection (finally closes it)
            await reader.read()  # until the client closes
            self.disconnects += 1
        except (asyncio.IncompleteReadError, ConnectionError):
            self.disconnects += 1
        finally:
            writer.close()

    def stop(self) -> None:
        assert self.server is not None
        self.server.close()


def _ok(body: bytes, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n%scontent-length: %d\r\n\r\n%s" % (extra, len(body), body)


def run(case):
    return asyncio.run(case())


def test_a_post_carries_the_fixed_and_extra_headers_under_the_base_path_and_reads_the_answer():
    async def case():
        backend = Backend([(_ok(b'{"a":1}', b"x-request-id: r1\r\n"), False)])
        port = await backend.start()
        pool = WirePool("127.0.0.1", port, False, "/v1", HEADERS)
        response = await pool.post("chat/completions", b'{"q":1}', "application/json", 5.0, {"anthropic-version": "2023-06-01"})
        assert (response.status, response.headers["X-Request-Id"]) == (200, "r1")
        assert await response.read() == b'{"a":1}'
        response.release()
        pool.close()
        backend.stop()
        return backend.requests[0]

    request = run(case)
    head, body = request.split(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /v1/chat/completions HTTP/1.1"
    assert {b"host: 127.0.0.1:%d" % int(lines[1].split(b":")[-1]), b"accept: application/json", b"authorization: Bearer k",
            b"content-type: application/json", b"anthropic-version: 2023-06-01", b"content-length: 7"} <= set(lines[1:])
    assert body == b'{"q":1}'


def test_a_connection_whose_answer_was_read_whole_is_kept_alive_and_reused():
    async def case():
        backend = Backend([(_ok(b"1"), False), (_ok(b"2"), False), (_ok(b"3"), False)])
        pool = WirePool("127.0.0.1", await backend.start(), False, "", HEADERS)
        bodies = []
        for _ in range(3):
            response = await pool.post("x", b"{}", "application/json", 5.0)
            bodies.append(await response.read())
            response.release()
        pool.close()
        backend.stop()
        return bodies, backend.connections

    assert run(case) == ([b"1", b"2", b"3"], 1)


def test_an_answer_not_read_to_its_end_closes_its_connection_so_the_backend_stops():
    async def case():
        stream = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n" \
                 b"7\r\ndata: 1\r\n"  # the stream goes on: the client leaves after its first event
        backend = Backend([(stream, False), (_ok(b"next"), False)])
        pool = WirePool("127.0.0.1", await backend.start(), False, "", HEADERS)
        response = await pool.post("x", b"{}", "text/event-stream", 5.0)
        first = await response.chunks().__anext__()
        response.close()
        for _ in range(50):
            if backend.disconnects:
                break
            await asyncio.sleep(0.01)
        again = await pool.post("x", b"{}", "application/json", 5.0)
        body = await again.read()
        again.release()
        pool.close()
        backend.stop()
        return first, backend.disconnects, backend.connections, body

    assert run(case) == (b"data: 1", 1, 2, b"next")


@pytest.mark.parametrize("answer", [
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\ncontent-length: 11\r\n\r\nhello world",
], ids=["chunked", "content-length"])
def test_each_framing_gives_the_whole_body_in_order(answer):
    async def case():
        backend = Backend([(answer, False)])
        pool = WirePool("127.0.0.1", await backend.start(), False, "", HEADERS)
        response = await pool.post("x", b"{}", "application/json", 5.0)
        chunks = [c async for c in response.chunks()]
        response.release()
        pool.close()
        backend.stop()
        return b"".join(chunks)

    assert run(case) == b"hello world"


def test_a_body_framed_by_the_connections_end_is_complete_when_the_backend_closes():
    async def case():
        backend = Backend([(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\ndata: 1\n\ndata: [DONE]\n\n", True)])
        pool = WirePool("127.0.0.1", await backend.start(), False, "", HEADERS)
        response = await pool.post("x", b"{}", "text/event-stream", 5.0)
        body = await response.read()
        response.release()
        pool.close()
        backend.stop()
        return body

    assert run(case) == b"data: 1\n\ndata: [DONE]\n\n"


@pytest.mark.parametrize(("answer", "error"), [
    (b"", Disconnected),  # closed before any answer
    (b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{\"partial", BrokenBody),
    (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n", BrokenBody),  # no last chunk
    (b"SMTP ready\r\n\r\n", BadResponse),
], ids=["no-answer", "short-body", "unfinished-chunks", "not-http"])
def test_a_broken_answer_raises_what_broke_it(answer, error):
    async def case():
        backend = Backend([(answer, True)])
        pool = WirePool("127.0.0.1", await backend.start(), False, "", HEADERS)
        try:
            response = await pool.post("x", b"{}", "application/json", 5.0)
            await response.read()
        finally:
            pool.close()
            backend.stop()

    with pytest.raises(error):
        run(case)


def test_an_unreachable_backend_fails_to_connect():
    async def case():
        pool = WirePool("127.0.0.1", free_port(), False, "", HEADERS)  # nothing listens there
        await pool.post("x", b"{}", "application/json", 5.0)

    with pytest.raises(ConnectFailed):
        run(case)


def test_a_header_with_a_line_break_never_reaches_the_backend():
    async def case():
        backend = Backend([(_ok(b"{}"), False)])
        pool = WirePool("127.0.0.1", await backend.start(), False, "", HEADERS)
        try:
            await pool.post("x", b"{}", "application/json", 5.0, {"anthropic-beta": "a\r\nx-evil: 1"})
        finally:
            pool.close()
            backend.stop()

    with pytest.raises(ValueError, match="line break"):
        run(case)


def test_a_slow_reader_pauses_the_backend_instead_of_buffering_without_bound():
    async def case():
        big = b"x" * (1024 * 1024)
        backend = Backend([(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(big), big), False)])
        pool = WirePool("127.0.0.1", await backend.start(), False, "", HEADERS)
        response = await pool.post("x", b"{}", "application/json", 5.0)
        await asyncio.sleep(0.3)  # the client relays nothing yet
        buffered = response._buffered
        got = b"".join([c async for c in response.chunks()])
        response.release()
        pool.close()
        backend.stop()
        return buffered, len(got)

    buffered, total = run(case)
    assert buffered < 600 * 1024  # paused near the high-water mark (256 KiB, plus what one read brings)
    assert total == 1024 * 1024


def _trickle_backend(gaps_s: list[float]):
    """A loopback backend that sends a chunked stream's chunks with the given pauses before each."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        await reader.readexactly(int(head.split(b"content-length: ")[1].split(b"\r\n")[0]))
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        for i, gap in enumerate(gaps_s):
            await asyncio.sleep(gap)
            writer.write(b"2\r\n%02d\r\n" % i)
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        await reader.read()
        writer.close()

    return serve


def test_a_stream_silent_for_its_idle_limit_raises_stream_idle_and_one_that_keeps_sending_does_not():
    async def read_all(gaps_s: list[float], idle_s: float, reader_pause_s: float = 0.0) -> list[bytes]:
        server = await asyncio.start_server(_trickle_backend(gaps_s), "127.0.0.1", 0)
        pool = WirePool("127.0.0.1", server.sockets[0].getsockname()[1], False, "", HEADERS)
        try:
            response = await pool.post("x", b"{}", "text/event-stream", 5.0)
            got = []
            async for chunk in response.chunks(idle_s, time.monotonic() + 30):
                got.append(chunk)
                await asyncio.sleep(reader_pause_s)  # the client reading slowly is not the backend's silence
            response.release()
            return got
        finally:
            pool.close()
            server.close()

    assert b"".join(asyncio.run(read_all([0.05] * 12, idle_s=0.3))) == b"".join(b"%02d" % i for i in range(12))
    assert len(b"".join(asyncio.run(read_all([0.0, 0.0], idle_s=0.2, reader_pause_s=0.4)))) == 4
    with pytest.raises(StreamIdle):
        asyncio.run(read_all([0.0, 1.0], idle_s=0.3))


def test_a_stream_past_its_end_raises_stream_idle_even_while_the_backend_keeps_sending():
    async def case() -> None:
        server = await asyncio.start_server(_trickle_backend([0.05] * 40), "127.0.0.1", 0)
        pool = WirePool("127.0.0.1", server.sockets[0].getsockname()[1], False, "", HEADERS)
        try:
            response = await pool.post("x", b"{}", "text/event-stream", 5.0)
            async for _ in response.chunks(10.0, time.monotonic() + 0.4):
                pass
        finally:
            pool.close()
            server.close()

    started = time.monotonic()
    with pytest.raises(StreamIdle):
        asyncio.run(case())
    assert time.monotonic() - started < 1.5


def test_a_body_larger_than_the_high_water_mark_is_read_whole():
    # read() takes the body as it arrives: reading must never stop at the mark a slow stream pauses at.
    async def case():
        big = b"x" * (1024 * 1024)
        backend = Backend([(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(big), big), False), (_ok(b"next"), False)])
        pool = WirePool("127.0.0.1", await backend.start(), False, "", HEADERS)
        response = await pool.post("x", b"{}", "application/json", 5.0)
        async with asyncio.timeout(5):
            body = await response.read()
        response.release()
        again = await pool.post("x", b"{}", "application/json", 5.0)  # the same connection, resumed
        body2 = await again.read()
        again.release()
        pool.close()
        backend.stop()
        return len(body), body2, backend.connections

    assert run(case) == (1024 * 1024, b"next", 1)


@pytest.mark.parametrize("extra", [
    b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nevil",  # a whole second answer nobody asked for
    b"HTTP/1.1 200 OK\r\ncontent-le",  # the start of one: left in the parser, it would garble the next answer
], ids=["whole", "partial"])
def test_bytes_after_the_answer_are_not_part_of_it_and_its_connection_is_not_reused(extra):
    async def case():
        backend = Backend([(_ok(b"hi") + extra, False), (_ok(b"next"), False)])
        pool = WirePool("127.0.0.1", await backend.start(), False, "", HEADERS)
        response = await pool.post("x", b"{}", "application/json", 5.0)
        await asyncio.sleep(0.05)  # the extra bytes are in before the body is read
        body = await response.read()
        response.release()
        again = await pool.post("x", b"{}", "application/json", 5.0)
        body2 = await again.read()
        again.release()
        pool.close()
        backend.stop()
        return body, body2, backend.connections

    assert run(case) == (b"hi", b"next", 2)



@pytest.mark.parametrize(("answer", "body", "connections"), [
    (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\nx-trailer: 1\r\n\r\n", b"hi", 1),  # trailers
    (b"HTTP/1.1 100 Continue\r\n\r\n" + _ok(b"hi"), b"hi", 1),  # an interim answer, then the answer
    (b"HTTP/1.1 204 No Content\r\n\r\n", b"", 1),  # no body, without a length
    (b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nhi", b"hi", 2),
    (b"HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nhi", b"hi", 2),  # HTTP/1.0 without keep-alive
], ids=["trailers", "100-continue", "204", "connection-close", "http-1.0"])
def test_the_answer_says_whether_its_connection_is_reused(answer, body, connections):
    async def case():
        backend = Backend([(answer, False), (_ok(b"next"), False)])
        pool = WirePool("127.0.0.1", await backend.start(), False, "", HEADERS)
        bodies = []
        for _ in range(2):
            response = await pool.post("x", b"{}", "application/json", 5.0)
            async with asyncio.timeout(5):
                bodies.append(await response.read())
            response.release()
        pool.close()
        backend.stop()
        return bodies, backend.connections

    assert run(case) == ([body, b"next"], connections)


def test_idle_connections_past_the_keepalive_are_closed_while_a_warmer_one_serves_the_traffic():
    async def case():
        backend = Backend([(_ok(b"%d" % i), False) for i in range(40)])
        pool = WirePool("127.0.0.1", await backend.start(), False, "", HEADERS, keepalive_s=0.3)

        async def call() -> bytes:
            response = await pool.post("x", b"{}", "application/json", 5.0)
            body = await response.read()
            response.release()
            return body

        await asyncio.gather(*(call() for _ in range(4)))  # a burst: four connections, then idle in the pool
        for _ in range(10):  # then one call at a time, for longer than the keep-alive: the warmest serves them
            await call()
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.05)
        disconnects = backend.disconnects
        pool.close()
        backend.stop()
        return backend.connections, disconnects

    assert run(case) == (4, 3)  # the three the burst left behind were closed, the warm one kept


def test_an_ipv6_backend_gets_its_literal_in_brackets_in_the_host_header():
    async def case():
        backend = Backend([(_ok(b"{}"), False)])
        port = await backend.start("::1")
        pool = WirePool("::1", port, False, "/v1", HEADERS)
        response = await pool.post("chat/completions", b"{}", "application/json", 5.0)
        await response.read()
        response.release()
        pool.close()
        backend.stop()
        return port, backend.requests[0].split(b"\r\n")[:2]

    port, (line, host) = run(case)
    assert (line, host) == (b"POST /v1/chat/completions HTTP/1.1", b"host: [::1]:%d" % port)


def _certificate(tmp_path, name: str) -> tuple[str, str]:
    """A self-signed certificate for `name` (the openssl command line makes it: no library needed)."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a certificate")
    cert, key = tmp_path / f"{name}.crt", tmp_path / f"{name}.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "2", "-subj", f"/CN={name}", "-addext", f"subjectAltName=DNS:{name}"],
                   check=True, capture_output=True)
    return str(cert), str(key)


@pytest.mark.parametrize(("certified", "trusted", "works"), [
    ("localhost", True, True),
    ("localhost", False, False),  # a certificate nobody vouches for
    ("elsewhere.example", True, False),  # a trusted certificate for another name
], ids=["trusted", "untrusted", "wrong-name"])
def test_tls_verifies_the_backends_certificate_and_its_name(tmp_path, monkeypatch, certified, trusted, works):
    cert, key = _certificate(tmp_path, certified)
    if trusted:  # the operator's way to trust a private CA: OpenSSL reads SSL_CERT_FILE for its default paths
        monkeypatch.setenv("SSL_CERT_FILE", cert)
    else:
        monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "none.pem"))
    names = []

    async def case():
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(cert, key)
        tls.sni_callback = lambda _sock, name, _ctx: names.append(name)
        backend = Backend([(_ok(b'{"tls":1}'), False)])
        pool = WirePool("localhost", await backend.start("127.0.0.1", tls), True, "", HEADERS)
        try:
            response = await pool.post("x", b"{}", "application/json", 5.0)
            body = await response.read()
            response.release()
            return body, backend.requests[0].split(b"\r\n")[1]
        finally:
            pool.close()
            backend.stop()

    if works:
        body, host = run(case)
        assert (body, names) == (b'{"tls":1}', ["localhost"])
        assert host.startswith(b"host: localhost:")
    else:
        with pytest.raises(ConnectFailed):
            run(case)



def test_a_call_cancelled_while_waiting_for_the_head_closes_its_connection_so_the_backend_stops():
    async def case():
        asked, left = asyncio.Event(), asyncio.Event()

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            asked.set()
            await reader.read()  # a backend generating: the client's close is all it hears
            left.set()
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        pool = WirePool("127.0.0.1", server.sockets[0].getsockname()[1], False, "", HEADERS)
        call = asyncio.ensure_future(pool.post("x", b"{}", "application/json", 5.0))
        await asyncio.wait_for(asked.wait(), 5)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        await asyncio.wait_for(left.wait(), 5)
        pool.close()
        server.close()

    run(case)


def test_a_pooled_connection_the_backend_closed_while_idle_is_not_reused():
    async def case():
        backend = Backend([(_ok(b"1"), True), (_ok(b"2"), False)])  # the backend closes after its first answer
        pool = WirePool("127.0.0.1", await backend.start(), False, "", HEADERS)
        bodies = []
        for _ in range(2):
            response = await pool.post("x", b"{}", "application/json", 5.0)
            bodies.append(await response.read())
            response.release()
            await asyncio.sleep(0.05)  # the close reaches the pool while the connection is idle
        pool.close()
        backend.stop()
        return bodies, backend.connections

    assert run(case) == ([b"1", b"2"], 2)


def test_a_body_framed_by_the_connections_end_is_broken_when_the_connection_is_reset():
    # Only an orderly close ends such a body: a reset truncates it, and the part must not pass for the whole.
    async def case():
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            head = await reader.readuntil(b"\r\n\r\n")
            await reader.readexactly(int(head.split(b"content-length: ")[1].split(b"\r\n")[0]))
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\ndata: 1\n\n")
            await writer.drain()
            await asyncio.sleep(0.05)
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with a reset
            writer.transport.abort()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        pool = WirePool("127.0.0.1", server.sockets[0].getsockname()[1], False, "", HEADERS)
        try:
            response = await pool.post("x", b"{}", "text/event-stream", 5.0)
            return await response.read()
        finally:
            pool.close()
            server.close()

    with pytest.raises(BrokenBody):
        run(case)


def test_a_call_given_up_while_its_request_is_still_unsent_drops_the_connection_at_once():
    # A backend that does not read (stuck, or its socket buffer full) must not keep a closed call's
    # connection open until it has read a request nobody wants any more: what is unsent is dropped.
    async def case():
        asked, outcome = asyncio.Event(), []

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            asked.set()
            await asyncio.sleep(0.5)  # not reading while the client gives up
            got = 0
            try:
                while chunk := await reader.read(1 << 20):
                    got += len(chunk)
                outcome.append(("closed", got))
            except ConnectionError:
                outcome.append(("reset", got))
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        pool = WirePool("127.0.0.1", server.sockets[0].getsockname()[1], False, "", HEADERS)
        body = b"x" * (32 * 1024 * 1024)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2):
                await pool.post("x", body, "application/json", 5.0)
        await asyncio.wait_for(asked.wait(), 5)
        for _ in range(200):
            if outcome:
                break
            await asyncio.sleep(0.02)
        pool.close()
        server.close()
        return outcome

    [(how, got)] = run(case)
    assert got < 32 * 1024 * 1024, how  # the client did not wait for the backend to read its whole request
