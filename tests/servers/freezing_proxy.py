"""A loopback TCP proxy to a Unix socket that can be frozen: the network between a client and its server
stops carrying bytes while both ends stay up (a dropped VPN, a partition), which no server can be told to do.

Frozen, it relays nothing either way and new connections are accepted but never answered (so a cancel
request, which opens a connection of its own, waits as it would for an unreachable host). Thawed, the bytes
held meanwhile flow on.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading

from tests.servers import ClosedOnExit


class FreezingProxy(ClosedOnExit):
    def __init__(self, unix_path: str) -> None:
        self._target = unix_path
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)  # so that the accepting thread sees close() (closing does not wake it)
        self.port: int = self._listener.getsockname()[1]
        self._flowing = threading.Event()
        self._flowing.set()
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = [self._listener]
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def freeze(self) -> None:
        self._flowing.clear()

    def thaw(self) -> None:
        self._flowing.set()

    def close(self) -> None:
        self._closed.set()
        self._flowing.set()
        for sock in self._sockets:
            with contextlib.suppress(OSError):
                sock.close()
        for thread in self._threads:
            thread.join(5)


    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            self._sockets.append(client)
            self._flowing.wait()  # frozen: the connection is accepted, and nothing answers it
            if self._closed.is_set():
                return
            server = socket.socket(socket.AF_UNIX)
            server.connect(self._target)
            self._sockets.append(server)
            for source, sink in ((client, server), (server, client)):
                thread = threading.Thread(target=self._pump, args=(source, sink), daemon=True)
                self._threads.append(thread)
                thread.start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        """Bytes from ``source`` to ``sink`` while flowing; frozen, they wait in the kernel's buffers."""
        readable = select.poll()  # not select.select: a process with over 1,023 descriptors open (the serial
        readable.register(source, select.POLLIN)  # suite's stores) got ValueError there, and the proxy went dead
        while not self._closed.is_set():
            self._flowing.wait()
            try:
                if not readable.poll(50):
                    continue
                if not self._flowing.is_set():  # frozen while waiting: leave these bytes unread
                    continue
                data = source.recv(1 << 20)
                if not data:
                    with contextlib.suppress(OSError):
                        sink.shutdown(socket.SHUT_WR)
                    return
                sink.sendall(data)
            except (OSError, ValueError):  # closed (ValueError: by close(), as select looked at it)
                return
