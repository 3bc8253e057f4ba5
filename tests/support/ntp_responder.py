"""Small NTP test servers on 127.0.0.1: one whose clock is shifted by a chosen number of
seconds, and one that reads every query and never answers."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Iterator

NTP_EPOCH_OFFSET = 2208988800  # seconds from 1900-01-01 (NTP era 0) to 1970-01-01
PACKET = struct.Struct("!BBbbII4sQQQQ")  # the 48-byte NTPv4 header, timestamps as raw 64 bits
MODE_CLIENT, MODE_SERVER = 3, 4


def ntp_timestamp(unix_time: float) -> int:
    """64-bit NTP timestamp (32.32 fixed point, seconds since 1900) of a Unix time."""
    seconds = unix_time + NTP_EPOCH_OFFSET
    whole = int(seconds)
    return (whole << 32) | int((seconds - whole) * 2**32)


class SkewedNtpServer:
    """Answers NTP client packets on 127.0.0.1 with its clock `skew` seconds ahead of ours.

    leap and stratum are what the answer claims about the server's own synchronisation
    (0 and 2: a synchronised server; 3 and 0: one that is not). Serves from a daemon thread
    between start() and stop(); `queries` counts the client packets it answered.
    """

    def __init__(self, skew: float, leap: int = 0, stratum: int = 2) -> None:
        self.skew = skew
        self.leap = leap
        self.stratum = stratum
        self.queries = 0
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.bind(("127.0.0.1", 0))
        self.port: int = self._sock.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name=f"ntp-skew-{skew:+g}",
                                        daemon=True)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> SkewedNtpServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        _wake(self._sock)
        self._thread.join(timeout=5)
        self._sock.close()

    def answer(self, query: bytes, received: float) -> bytes | None:
        """The reply to one datagram received at Unix time received; None to ignore it."""
        if len(query) < PACKET.size:
            return None
        first, _, poll, _, _, _, _, _, _, _, client_transmit = PACKET.unpack_from(query)
        if first & 0x7 != MODE_CLIENT:
            return None
        version = (first >> 3) & 0x7
        shifted = received + self.skew
        return PACKET.pack(
            (self.leap << 6) | (version << 3) | MODE_SERVER,
            self.stratum,
            poll,
            -20,  # precision: about a microsecond
            0,  # root delay
            1 << 10,  # root dispersion: 1/64 s
            b"TEST",  # reference id
            ntp_timestamp(shifted - 1),  # reference: last set a second ago
            client_transmit,  # origin: echoes the client's transmit timestamp
            ntp_timestamp(shifted),  # receive
            ntp_timestamp(time.time() + self.skew),  # transmit
        )

    def _serve(self) -> None:
        while True:
            query, client = self._sock.recvfrom(512)
            if self._stop.is_set():
                return
            reply = self.answer(query, time.time())
            if reply is not None:
                self._sock.sendto(reply, client)
                self.queries += 1


def _wake(sock: socket.socket) -> None:
    """Unblock the thread waiting in sock.recv: an empty datagram to the socket itself."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as waker:
        waker.sendto(b"", sock.getsockname())


@contextlib.contextmanager
def skewed_ntp_server(skew: float, leap: int = 0, stratum: int = 2) -> Iterator[SkewedNtpServer]:
    server = SkewedNtpServer(skew, leap, stratum).start()
    try:
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def silent_udp_server() -> Iterator[int]:
    """A UDP socket bound on 127.0.0.1 that takes every datagram and answers none.

    Bound (unlike a closed port, which answers with ICMP port unreachable and makes the
    client fail at once), so a client waits for its whole timeout. Yields the port."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        stop = threading.Event()

        def drain() -> None:
            while not stop.is_set():
                sock.recv(512)

        thread = threading.Thread(target=drain, name="ntp-silent", daemon=True)
        thread.start()
        try:
            yield sock.getsockname()[1]
        finally:
            stop.set()
            _wake(sock)
            thread.join(timeout=5)
