"""A raw socket HTTP/1.1 upstream whose answer is the bytes a test chooses."""
import socket
import threading
import time

from harness import free_port

GOOD = b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"


class RawUpstream:
    """Reads each request (head and Content-Length body), records its
    Idempotency-Key, writes `answer` and closes the connection. With `read_body`
    false it answers once the head came and closes with the body unread (a reset), or,
    with `hold_open` seconds, keeps the connection open that long first, reading
    nothing more; with `end_first` too, it ends its side of the connection first. With `tls` (an ssl.SSLContext for a server) it speaks HTTPS.
    """

    def __init__(self, tls=None):
        self.answer = GOOD
        self.read_body = True
        self.hold_open = 0
        self.end_first = False
        self.keys = []
        self.port = free_port()
        self.tls = tls
        self.url = "%s://127.0.0.1:%d" % ("https" if tls else "http", self.port)
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", self.port))
        self.sock.listen(64)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handshake_and_answer, args=(conn,), daemon=True).start()

    def _handshake_and_answer(self, conn):
        if self.tls:
            try:
                conn = self.tls.wrap_socket(conn, server_side=True)
            except (OSError, ValueError):
                conn.close()
                return
        self._answer(conn)

    def _answer(self, conn):
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
                if name.strip().lower() == b"idempotency-key":
                    self.keys.append(value.strip().decode())
            while self.read_body and len(body) < length:
                body += conn.recv(65536)
            conn.sendall(self.answer)
            if self.end_first:
                conn.shutdown(socket.SHUT_WR)  # a FIN (under TLS without close_notify)
            if not self.read_body:
                time.sleep(self.hold_open or 0.05)  # the answer goes before the reset

    def close(self):
        self.sock.close()
