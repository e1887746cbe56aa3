"""A TCP relay on loopback in front of a server, as a load balancer or a NAT between clients and a
service is: it copies bytes both ways, and can stop copying a server's bytes back on the
connections open now whose first bytes from the client start with a given request, keeping them
open: a stream that goes silent without breaking (a middlebox that dropped its state, a member
whose watch stalled). Connections made afterwards are relayed as usual.
"""
import socket
import threading


class _Stream:
    """One relayed connection: the client's first bytes, whether it is silenced, its two sockets;
    closed once both directions have ended."""

    def __init__(self, client, upstream):
        self.first = b""
        self.quiet = threading.Event()
        self.sockets = (client, upstream)
        self.lock = threading.Lock()
        self.ended = 0

    def direction_ended(self):
        with self.lock:
            self.ended += 1
            last = self.ended == 2
        if last:
            for s in self.sockets:
                s.close()


class Relay:
    def __init__(self, backend_port, host="127.0.0.1"):
        self.backend = (host, backend_port)
        self.listener = socket.create_server((host, 0))
        self.port = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.streams = []  # the open ones (the client has not ended its side)
        threading.Thread(target=self._accept, daemon=True).start()

    def silence(self, request):
        """Stops relaying the server's bytes on every open connection whose client began with
        `request` (bytes); returns how many it silenced."""
        silenced = 0
        with self.lock:
            for stream in self.streams:
                if stream.first.startswith(request) and not stream.quiet.is_set():
                    stream.quiet.set()
                    silenced += 1
        return silenced

    def close(self):
        """Ends the relay and every connection through it (their threads wake and end)."""
        with self.lock:
            sockets = [s for stream in self.streams for s in stream.sockets]
        for sock in [self.listener, *sockets]:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.listener.close()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
                upstream = socket.create_connection(self.backend)
            except OSError:
                return
            stream = _Stream(client, upstream)
            with self.lock:
                self.streams.append(stream)
            threading.Thread(target=self._up, args=(stream,), daemon=True).start()
            threading.Thread(target=self._down, args=(stream,), daemon=True).start()

    def _up(self, stream):
        client, upstream = stream.sockets
        try:
            while data := client.recv(65536):
                if not stream.first:
                    stream.first = data
                upstream.sendall(data)
        except OSError:
            pass
        with self.lock:  # the client is done with it: no longer open
            self.streams.remove(stream)
        _end(upstream)
        stream.direction_ended()

    @staticmethod
    def _down(stream):
        client, upstream = stream.sockets
        try:
            while data := upstream.recv(65536):
                if not stream.quiet.is_set():
                    client.sendall(data)
        except OSError:
            pass
        if not stream.quiet.is_set():
            _end(client)
        stream.direction_ended()


def _end(sock):
    try:
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass
