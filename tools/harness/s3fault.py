#!/usr/bin/env python3
"""s3fault: a fault-injecting HTTP/1.1 reverse proxy in front of an S3 server (Python stdlib only).

Requests are forwarded as they came: method, path and query, every header unchanged (Authorization,
and Host as the client sent it, so a SigV4 signature still verifies upstream; only Connection and
Keep-Alive are the proxy's own), bodies streamed both ways, keep-alive on both sides. Faults, set at
run time, apply to the requests that arrive after them:
  slowdown RATE   answer that fraction 503 with S3's <Error><Code>SlowDown</Code> body (not forwarded)
  error500 RATE   answer that fraction 500 InternalError (not forwarded)
  delay SECONDS   hold each request that long before anything else is done with it
  hang            hold each request, unanswered, until hang is cleared (then it goes on upstream)
  truncate RATE   that fraction of responses with a body: half the body (the full Content-Length
                  announced), then the connection is closed
  corrupt RATE    that fraction of GET responses with a 2xx body: one byte inverted (offset in stats)
  down            the listening socket closed (connections refused) and every client connection cut;
                  `up` or `clear` listens again on the same port
  clear           every fault off, hung requests released, listening again if down
A rate is a fraction in [0, 1], drawn from --seed's random sequence. Each fault may be limited to
some methods (methods=GET,PUT) and to its next N uses (count=N; then it is off by itself).

Control: GET or POST /__fault__/CMD[/VALUE][?methods=...&count=N] from a loopback address, on the
proxied port (while it listens) or on the control port (always): CMD is one of the faults above,
`NAME/off` (that fault off), `up`, `reset` (counters to zero) or `stats`. Every answer is the state
as JSON: {"faults": {...}, "counters": {...}, "methods": {...}, "last_corrupt": {...}, ...}.
Counters: requests, forwarded, slowdown, error500, delayed, hung, hanging (held now), truncated,
corrupted, dropped (requests and connections cut while down), upstream_errors (502 answered: the
upstream refused or broke; a paused upstream is waited for, as the client would), control.

Usage: s3fault.py --upstream URL [--listen PORT] [--control PORT] [--bind ADDR] [--seed N]
                  [--upstream-timeout S] [--verbose]
       (PORT 0, the default: a free port; the first line on stdout says which:
        "s3fault: listening 127.0.0.1:PORT control 127.0.0.1:PORT upstream URL")
       s3fault.py ctl CONTROL_URL CMD [VALUE] [methods=...] [count=N]   (prints the JSON answer)
"""
import argparse
import http.client
import http.server
import ipaddress
import json
import random
import select
import signal
import socket
import sys
import threading
import time
import urllib.parse
import urllib.request

CHUNK = 256 * 1024
RATE_FAULTS = ("slowdown", "error500", "truncate", "corrupt")
FAULTS = RATE_FAULTS + ("delay", "hang", "down")
COUNTERS = ("requests", "forwarded", "slowdown", "error500", "delayed", "hung", "hanging", "truncated",
            "corrupted", "dropped", "upstream_errors", "control")
# Hop-by-hop headers the proxy keeps to itself on each side. Transfer-Encoding is relayed as it is
# (a chunked request body goes upstream chunked, with its framing).
OWN_HEADERS = {"connection", "keep-alive", "proxy-connection"}
ERRORS = {
    503: ("SlowDown", "Please reduce your request rate."),
    500: ("InternalError", "We encountered an internal error. Please try again."),
    502: ("BadGateway", "s3fault: the upstream S3 server did not answer."),
}


class ClientGone(Exception):
    """The client closed (or reset) its connection in the middle of a request."""


class Rule:
    def __init__(self, value, methods, count):
        self.value, self.methods, self.count = value, methods, count

    def as_json(self):
        return {"value": self.value, "methods": sorted(self.methods) if self.methods else None,
                "count": self.count}


class Faults:
    """The faults in force and what they did; one lock over all of it (and the random sequence)."""

    def __init__(self, seed):
        self.lock = threading.Lock()
        self.cleared = threading.Condition(self.lock)
        self.rng = random.Random(seed)
        self.rules = {}
        self.counters = dict.fromkeys(COUNTERS, 0)
        self.methods = {}
        self.last_corrupt = None

    def count(self, name, n=1):
        with self.lock:
            self.counters[name] += n

    def _use(self, name, method):
        """The rule for NAME if it applies to METHOD (a rate drawn), its count taken; else None. A
        rule whose count is used up is gone, but for hang's: it holds what it took until cleared."""
        rule = self.rules.get(name)
        if rule is None or (rule.methods and method not in rule.methods):
            return None
        if rule.count is not None and rule.count <= 0:
            return None
        if name in RATE_FAULTS and self.rng.random() >= rule.value:
            return None
        if rule.count is not None:
            rule.count -= 1
            if rule.count <= 0 and name != "hang":
                del self.rules[name]
        return rule

    def draw(self, name, method):
        with self.lock:
            return self._use(name, method) is not None

    def delay(self, method):
        with self.lock:
            rule = self._use("delay", method)
            if rule is not None:
                self.counters["delayed"] += 1
            return rule.value if rule else 0

    def hang(self, method, handler):
        """Holds the request while a hang applies to it; True if it was held."""
        with self.lock:
            rule = self._use("hang", method)
            if rule is None:
                return False
            self.counters["hung"] += 1
            self.counters["hanging"] += 1
            try:
                while self.rules.get("hang") is rule and not handler.cut:
                    self.cleared.wait(0.5)
            finally:
                self.counters["hanging"] -= 1
            return True

    def set(self, name, value, methods, count):
        with self.lock:
            self.rules[name] = Rule(value, methods, count)

    def off(self, name=None):
        with self.lock:
            for n in [name] if name else list(self.rules):
                self.rules.pop(n, None)
            self.cleared.notify_all()

    def state(self, proxy):
        with self.lock:
            return {"faults": {n: r.as_json() for n, r in self.rules.items()},
                    "counters": dict(self.counters), "methods": dict(self.methods),
                    "last_corrupt": self.last_corrupt, "listen": proxy.port, "down": proxy.is_down,
                    "upstream": proxy.upstream_url}


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128  # socketserver's 5 drops SYNs under 32 connecting clients (1 s retries)

    def __init__(self, addr, proxy, data):
        self.proxy, self.data = proxy, data
        super().__init__(addr, Handler)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "s3fault"

    def setup(self):
        super().setup()
        self.proxy = self.server.proxy
        self.upstream = None
        self.cut = False
        self.expect_100 = False
        if self.server.data:
            self.proxy.track(self, True)

    def finish(self):
        try:
            super().finish()
        finally:
            if self.server.data:
                self.proxy.track(self, False)
            self.drop_upstream()

    def log_message(self, format, *args):
        if self.proxy.verbose:
            super().log_message(format, *args)

    def note(self, what):
        sys.stderr.write(f"s3fault: {what}: {self.command} {self.path}\n")

    def handle_expect_100(self):
        # Decided per request: an injected error answers without a 100 Continue (as S3 does); a
        # forwarded request gets its 100 Continue before its body is read.
        self.expect_100 = True
        return True

    def do_GET(self):
        self.handle_request()

    do_PUT = do_POST = do_DELETE = do_HEAD = do_OPTIONS = do_PATCH = do_GET

    # --- the request's body ---

    def body_framing(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return "chunked", None
        return "length", int(self.headers.get("Content-Length") or 0)

    def relay_body(self, write):
        """Reads the request body off the client, passing each piece (chunked: with its framing) to
        write; sends the 100 Continue it waits for first."""
        kind, length = self.body_framing()

        def read(n, line=False):
            try:
                piece = self.rfile.readline(n) if line else self.rfile.read(n)
            except OSError as e:
                raise ClientGone(str(e)) from e
            if not piece:
                raise ClientGone("the client closed in the middle of a request body")
            return piece

        try:
            if self.expect_100:
                self.expect_100 = False
                self.send_response_only(100)
                self.end_headers()
                self.wfile.flush()
        except OSError as e:
            raise ClientGone(str(e)) from e
        if kind == "length":
            while length > 0:
                piece = read(min(CHUNK, length))
                write(piece)
                length -= len(piece)
            return
        while True:  # chunk-size line, data, CRLF; after the last chunk, trailers and an empty line
            line = read(65537, line=True)
            write(line)
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise ClientGone(f"a bad chunk-size line {line[:40]!r}") from None
            if size == 0:
                while True:
                    trailer = read(65537, line=True)
                    write(trailer)
                    if trailer in (b"\r\n", b"\n"):
                        return
            left = size + 2
            while left > 0:
                piece = read(min(CHUNK, left))
                write(piece)
                left -= len(piece)

    # --- answers of the proxy's own ---

    def answer(self, status, body, content_type="application/json", close=False):
        self.send_response_only(status)
        self.send_header("Date", self.date_time_string())
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)) if self.command != "HEAD" else "0")
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.wfile.flush()

    def answer_error(self, status, close=False):
        code, message = ERRORS[status]
        request_id = f"s3fault{self.proxy.next_id():012d}"
        resource = urllib.parse.urlsplit(self.path).path
        body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{message}'
                f"</Message><Resource>{resource}</Resource><RequestId>{request_id}</RequestId></Error>"
                ).encode()
        # A request whose body was not read (it waited for a 100 Continue, or it is not wanted):
        # drained when it is small, else the connection is closed after the answer. CLOSE: the
        # body may be read in part (an upstream that failed under it): closed.
        if close:
            pass
        elif not self.expect_100:
            kind, length = self.body_framing()
            if kind == "length" and length <= 4 * CHUNK:
                self.relay_body(lambda piece: None)
            else:
                close = True
        else:
            close = True
        self.answer(status, body, "application/xml", close=close)

    # --- a request ---

    def handle_request(self):
        try:
            self.serve_request()
        except (ClientGone, OSError):
            self.close_connection = True  # the client went away, or its connection was cut
        finally:
            self.expect_100 = False

    def serve_request(self):
        if self.path.startswith("/__fault__/"):
            return self.control()
        if not self.server.data:
            return self.answer(404, b'{"error": "the control port answers /__fault__/ only"}\n')
        faults = self.proxy.faults
        with faults.lock:
            faults.counters["requests"] += 1
            faults.methods[self.command] = faults.methods.get(self.command, 0) + 1
        if self.proxy.is_down or self.cut:
            return self.drop()
        if faults.hang(self.command, self):
            self.note("hung")
            if self.proxy.is_down or self.cut:
                return self.drop()
        seconds = faults.delay(self.command)
        if seconds:
            time.sleep(seconds)
        for name, status in (("slowdown", 503), ("error500", 500)):
            if faults.draw(name, self.command):
                faults.count(name)
                self.note(name)
                return self.answer_error(status)
        self.forward()

    def drop(self):
        self.proxy.faults.count("dropped")
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def drop_upstream(self):
        if self.upstream is not None:
            self.upstream.close()
            self.upstream = None

    def upstream_connection(self):
        conn = self.upstream
        if conn is not None and conn.sock is not None:
            # An idle keep-alive connection that reads as ready was closed by the upstream.
            if select.select([conn.sock], [], [], 0)[0]:
                self.drop_upstream()
        if self.upstream is None:
            self.upstream = http.client.HTTPConnection(self.proxy.upstream_host, self.proxy.upstream_port,
                                                       timeout=self.proxy.upstream_timeout)
        return self.upstream

    def forward(self):
        faults = self.proxy.faults
        conn = self.upstream_connection()
        try:
            conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            for name, value in self.headers.items():
                if name.lower() not in OWN_HEADERS:
                    conn.putheader(name, value)
            conn.endheaders()
            self.relay_body(conn.send)
            response = conn.getresponse()
        except ClientGone:
            self.drop_upstream()
            self.close_connection = True
            return
        except (OSError, http.client.HTTPException) as e:
            self.drop_upstream()
            if self.cut:
                return
            faults.count("upstream_errors")
            sys.stderr.write(f"s3fault: upstream: {type(e).__name__}: {e}: {self.command} {self.path}\n")
            return self.answer_error(502, close=True)
        faults.count("forwarded")
        try:
            self.relay_response(response)
        except (OSError, http.client.HTTPException):
            self.drop_upstream()  # the client went away (or was cut) in the middle: both ends closed
            self.close_connection = True
            return
        if response.will_close:
            self.drop_upstream()

    def relay_response(self, response):
        faults = self.proxy.faults
        length = response.length  # None: chunked or until close; 0 for HEAD, 204, 304
        has_body = self.command != "HEAD" and response.status not in (204, 304) and length != 0
        truncate = has_body and faults.draw("truncate", self.command)
        corrupt = (not truncate and has_body and self.command == "GET" and 200 <= response.status < 300
                   and faults.draw("corrupt", self.command))
        self.send_response_only(response.status, response.reason)
        chunked = response.chunked or (has_body and length is None)
        for name, value in response.getheaders():
            if name.lower() not in OWN_HEADERS and name.lower() != "transfer-encoding":
                self.send_header(name, value)
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if not has_body:
            response.read()  # (b""; done with the response: the upstream connection is free again)
            self.wfile.flush()
            return
        if truncate:
            # Half of what was announced (half of the first piece when the length is not known),
            # then the connection closed under the client.
            sent = 0
            if length is not None:
                while sent < length // 2:
                    piece = response.read(min(CHUNK, length // 2 - sent))
                    if not piece:
                        break
                    self.wfile.write(piece)
                    sent += len(piece)
            else:
                piece = response.read(CHUNK)
                piece = piece[:len(piece) // 2]
                if piece:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                sent = len(piece)
            self.wfile.flush()
            faults.count("truncated")
            self.note(f"truncated to {sent} of {length if length is not None else '?'} bytes")
            self.drop_upstream()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        offset = None
        if corrupt:
            with faults.lock:
                offset = faults.rng.randrange(length) if length else 0
        position = 0
        while True:
            piece = response.read(CHUNK)
            if not piece:
                break
            if offset is not None and position <= offset < position + len(piece):
                b = bytearray(piece)
                b[offset - position] ^= 0xFF
                piece = bytes(b)
                with faults.lock:
                    faults.counters["corrupted"] += 1
                    faults.last_corrupt = {"path": self.path, "offset": offset}
                self.note(f"corrupted byte {offset}")
            position += len(piece)
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
        if chunked:
            self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    # --- control ---

    def control(self):
        if not ipaddress.ip_address(self.client_address[0]).is_loopback:
            return self.answer(403, b'{"error": "control from loopback only"}\n')
        if self.command not in ("GET", "POST"):
            return self.answer(405, b'{"error": "GET or POST"}\n')
        if self.body_framing() != ("length", 0):
            self.relay_body(lambda piece: None)
        url = urllib.parse.urlsplit(self.path)
        parts = [p for p in url.path.split("/")[2:] if p]
        query = dict(urllib.parse.parse_qsl(url.query))
        proxy, faults = self.proxy, self.proxy.faults
        faults.count("control")
        try:
            cmd, value = (parts + [None, None])[:2]
            if len(parts) > 2 or cmd is None:
                raise ValueError("/__fault__/CMD[/VALUE]")
            methods = set(m.upper() for m in query.pop("methods", "").split(",") if m) or None
            count = int(query.pop("count")) if "count" in query else None
            if query:
                raise ValueError(f"unknown parameters {sorted(query)}")
            if count is not None and count <= 0:
                raise ValueError("count must be > 0")
            going_down = False
            if cmd == "stats":
                pass
            elif cmd == "clear":
                faults.off()
                proxy.up()
            elif cmd == "reset":
                with faults.lock:
                    hanging = faults.counters["hanging"]
                    faults.counters = dict.fromkeys(COUNTERS, 0)
                    faults.counters["hanging"] = hanging
                    faults.methods = {}
                    faults.last_corrupt = None
            elif cmd == "up":
                faults.off("down")
                proxy.up()
            elif cmd in FAULTS and value == "off":
                faults.off(cmd)
                if cmd == "down":
                    proxy.up()
            elif cmd in RATE_FAULTS:
                rate = float(value)
                if not 0 <= rate <= 1:
                    raise ValueError("a rate is a fraction in [0, 1]")
                faults.set(cmd, rate, methods, count)
            elif cmd == "delay":
                seconds = float(value)
                if not 0 <= seconds <= 3600:
                    raise ValueError("delay SECONDS in [0, 3600]")
                faults.set(cmd, seconds, methods, count)
            elif cmd == "hang":
                if value not in (None, "on"):
                    raise ValueError("hang, hang/on or hang/off")
                faults.set(cmd, True, methods, count)
            elif cmd == "down":
                if value not in (None, "on"):
                    raise ValueError("down, down/on or down/off")
                faults.set(cmd, True, None, None)
                going_down = True
            else:
                raise ValueError(f"unknown command {cmd!r}")
        except (ValueError, TypeError) as e:
            return self.answer(400, json.dumps({"error": str(e)}).encode() + b"\n")
        except OSError as e:  # listening again failed (the port taken meanwhile)
            return self.answer(500, json.dumps({"error": f"listening again: {e}"}).encode() + b"\n")
        sys.stderr.write(f"s3fault: control: {self.path}\n")
        if going_down:  # down before the answer: once it is read, connections are refused
            proxy.down(self)
        self.answer(200, json.dumps(faults.state(proxy), indent=1).encode() + b"\n", close=going_down)


class Proxy:
    def __init__(self, args):
        up = urllib.parse.urlsplit(args.upstream)
        if up.scheme != "http" or not up.hostname:
            raise SystemExit("s3fault: --upstream must be http://HOST[:PORT]")
        self.upstream_url = args.upstream
        self.upstream_host, self.upstream_port = up.hostname, up.port or 80
        self.upstream_timeout = args.upstream_timeout
        self.verbose = args.verbose
        self.faults = Faults(args.seed)
        self.bind = args.bind
        self.port = args.listen
        self.lock = threading.Lock()
        self.handlers = set()
        self.server = None
        self.is_down = False
        self.ids = 0
        self.listen()
        self.control = Server((args.bind, args.control), self, data=False)
        threading.Thread(target=self.control.serve_forever, args=(0.1,), daemon=True).start()

    def next_id(self):
        with self.lock:
            self.ids += 1
            return self.ids

    def listen(self):
        self.server = Server((self.bind, self.port), self, data=True)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, args=(0.1,), daemon=True).start()

    def track(self, handler, add):
        with self.lock:
            (self.handlers.add if add else self.handlers.discard)(handler)

    def down(self, asking):
        """Stops listening and cuts every client connection but ASKING's (it answers, then closes)."""
        with self.lock:
            if self.is_down:
                return
            self.is_down = True
            server, self.server = self.server, None
            handlers = [h for h in self.handlers if h is not asking]
        server.shutdown()
        server.server_close()
        for h in handlers:
            h.cut = True
            try:
                h.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.faults.count("dropped")
        with self.faults.lock:
            self.faults.cleared.notify_all()  # hung requests on cut connections end
        sys.stderr.write(f"s3fault: down: {len(handlers)} connections cut, port {self.port} closed\n")

    def up(self):
        with self.lock:
            if not self.is_down:
                return
            self.listen()
            self.is_down = False
        sys.stderr.write(f"s3fault: up: listening on port {self.port} again\n")


def ctl(argv):
    if len(argv) < 2:
        raise SystemExit("usage: s3fault.py ctl CONTROL_URL CMD [VALUE] [methods=...] [count=N]")
    url, words = argv[0].rstrip("/"), argv[1:]
    params = dict(w.split("=", 1) for w in words if "=" in w)
    path = "/".join(urllib.parse.quote(w) for w in words if "=" not in w)
    full = f"{url}/__fault__/{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
    method = "GET" if path == "stats" else "POST"
    try:
        with urllib.request.urlopen(urllib.request.Request(full, data=b"" if method == "POST" else None,
                                                           method=method), timeout=30) as r:
            sys.stdout.write(r.read().decode())
        return 0
    except urllib.error.HTTPError as e:
        sys.stderr.write(f"s3fault ctl: HTTP {e.code}: {e.read().decode().strip()}\n")
        return 1


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "ctl":
        return ctl(sys.argv[2:])
    p = argparse.ArgumentParser(prog="s3fault", description="A fault-injecting reverse proxy for S3.",
                                epilog="Faults and control: see the head of this file.")
    p.add_argument("--upstream", required=True, help="the S3 server, http://HOST:PORT")
    p.add_argument("--listen", type=int, default=0, help="the proxied port (0: a free one)")
    p.add_argument("--control", type=int, default=0, help="the control port (0: a free one)")
    p.add_argument("--bind", default="127.0.0.1")
    p.add_argument("--seed", type=int, default=1, help="of the random sequence the rates draw from")
    p.add_argument("--upstream-timeout", type=float, default=None,
                   help="seconds to wait on the upstream (default: as long as it takes)")
    p.add_argument("--verbose", action="store_true", help="log every request")
    args = p.parse_args()
    proxy = Proxy(args)
    print(f"s3fault: listening {args.bind}:{proxy.port} control {args.bind}:{proxy.control.server_address[1]} "
          f"upstream {args.upstream}", flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    while not done.wait(1):
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
