"""A TCP relay on loopback in front of a server, as a load balancer or a NAT between clients and a
service is: it copies bytes both ways, and can stop copying a server's bytes back on the
connections open now whose first bytes from the client start with a given request, keeping them
open: a stream that goes silent without breaking (a middlebox that dropped its state, a member
whose watch stalled). Connections made afterwards are relayed as usual.
"""
import socket
import threading


class Relay:
    def __init__(self, backend_port, host="127.0.0.1"):
        self.backend = (host, backend_port)
        self.listener = socket.create_server((host, 0))
        self.port = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.streams = []  # open: [first bytes from the client, silenced (an Event), sockets]
        threading.Thread(target=self._accept, daemon=True).start()

    def silence(self, request):
        """Stops relaying the server's bytes on every open connection whose client began with
        `request` (bytes); returns how many it silenced."""
        silenced = 0
        with self.lock:
            for first, quiet, _ in self.streams:
                if first[0].startswith(request) and not quiet.is_set():
                    quiet.set()
                    silenced += 1
        return silenced

    def close(self):
        """Ends the relay and every connection through it (their threads wake and end)."""
        with self.lock:
            sockets = [s for stream in self.streams for s in stream[2]]
        for sock in [self.listener, *sockets]:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
                upstream = socket.create_connection(self.backend)
            except OSError:
                return
            stream = [[b""], threading.Event(), (client, upstream)]
            with self.lock:
                self.streams.append(stream)
            threading.Thread(target=self._up, args=(client, upstream, stream),
                             daemon=True).start()
            threading.Thread(target=self._down, args=(upstream, client, stream[1]),
                             daemon=True).start()

    def _up(self, src, dst, stream):
        first = stream[0]
        try:
            while data := src.recv(65536):
                if not first[0]:
                    first[0] = data
                dst.sendall(data)
        except OSError:
            pass
        with self.lock:  # the client is done with it: no longer open
            if stream in self.streams:
                self.streams.remove(stream)
        Relay._end(dst)

    @staticmethod
    def _down(src, dst, quiet):
        try:
            while data := src.recv(65536):
                if not quiet.is_set():
                    dst.sendall(data)
        except OSError:
            pass
        if not quiet.is_set():
            Relay._end(dst)

    @staticmethod
    def _end(sock):
        try:
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
