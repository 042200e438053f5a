"""Prometheus metrics: an opt-in endpoint per node (`metrics_port`), gathered from `System.status()` on scrape.

Hosts count messages in and out with an int increment on paths that exist anyway, and layers record
latencies in a `Histogram` per host process (persistence: one observation per group commit). Nothing is
pushed: on each scrape the node asks the guardian for the status (host stats included) and turns it into
metric families (`StatusCollector`). On the multi-process base a `MetricsServer` actor on every node serves
its node's hosts (the leader's also the system's dead letters); on the in-process base a thread of the
process that started the system does.
"""

from __future__ import annotations

import bisect
import logging
import math
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from thespian.actors import Actor as ThespianActor
from thespian.actors import ActorExitRequest, WakeupMessage

from . import http_host
from .errors import ConfigError, SpawnFailed
from .messages import GetStatus, SystemStatus
from .supervision import PARENT_WAKEUP, ParentWatch
from .thespian_types import Address
from .validation import check_ip

if TYPE_CHECKING:
    from .context import ActorContext

log = logging.getLogger("reprise.metrics")

DEFAULT_HOST = "127.0.0.1"  # never exposed beyond this machine unless the user names an interface
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
"""Upper bounds (seconds) of the journal write latency histogram: an fsync'd SQLite commit to a slow PostgreSQL."""
JOURNAL_WRITE = "journal_write_seconds"
SCRAPE_WAIT = 4.0  # seconds a scrape waits for the status (the guardian waits up to 2 s for busy hosts)
_POLL = 0.2  # seconds between checks for a waiting scrape: its latency, against ~0.1% of a core idle
_POLL_WAKEUP = "reprise-metrics-poll"
_NAME = re.compile(r"[^a-zA-Z0-9_]")

HistogramData = tuple[tuple[float, ...], tuple[int, ...], float]
"""(upper bounds, count per bucket with one more for +Inf, sum of the observations): what a host reports."""


def check_options(metrics_port: object, metrics_host: object) -> None:
    """ConfigError unless `metrics_port` is None (off) or a TCP port, and `metrics_host` an IP address."""
    if metrics_port is not None and (isinstance(metrics_port, bool) or not isinstance(metrics_port, int)
                                     or not 0 < metrics_port < 65536):
        raise ConfigError(f"metrics_port must be an integer in 1..65535 (None: no metrics endpoint, the "
                          f"default), got {metrics_port!r}")
    check_ip("metrics_host", metrics_host)


class Histogram:
    """Counts per fixed bucket and their sum, filled in one process; no lock (hosts are single-threaded)."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...] = LATENCY_BUCKETS) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last: above every bound (+Inf)
        self.total = 0.0

    def observe(self, value: float) -> None:
        """Count one observation."""
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value

    def data(self) -> HistogramData:
        """The counts as plain tuples (they cross processes in HostStats)."""
        return self.bounds, tuple(self.counts), self.total


def histogram(context: ActorContext, name: str, bounds: tuple[float, ...] = LATENCY_BUCKETS) -> Histogram:
    """The host's histogram `name` (made on first use), reported with its stats and exported per host."""
    return context.extension((Histogram, name), lambda _: Histogram(bounds))


def host_histograms(extensions: dict[Any, Any]) -> dict[str, HistogramData]:
    """The histograms among a host's extensions (see `histogram`), by name."""
    return {key[1]: ext.data() for key, ext in extensions.items() if isinstance(ext, Histogram)}


# ---- turning a status into metric families ----------------------------------------------------------

def _stat_name(name: str) -> str:
    return _NAME.sub("_", name)


def families(status: SystemStatus, node: str | None, leader: bool) -> list[Any]:
    """The metric families of `node`'s hosts (hosts placed nowhere in particular run on the leader); every
    host's with `node` None (a client's endpoint: the whole system)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

    labels = ["node", "host"]
    up = GaugeMetricFamily("reprise_host_up", "1 if the host's process serves its path (state running)", labels=labels)
    alive = GaugeMetricFamily("reprise_host_actors_alive", "Actors in memory in the host", labels=labels)
    restarts = CounterMetricFamily("reprise_host_restarts", "Restarts of the host or of its top-level actor "
                                   "since its spawn", labels=labels)
    messages_in = CounterMetricFamily("reprise_host_messages_in", "Messages the host received from other "
                                      "processes", labels=labels)
    messages_out = CounterMetricFamily("reprise_host_messages_out", "Messages the host sent to other processes",
                                       labels=labels)
    parked = GaugeMetricFamily("reprise_host_messages_parked", "Messages the host holds back for destinations "
                               "whose process changed until its earlier ones landed (10 s at most)", labels=labels)
    unconfirmed = GaugeMetricFamily("reprise_unconfirmed_deliveries", "At-least-once deliveries not confirmed "
                                    "yet (the host's actors' stats 'unconfirmed')", labels=labels)
    delivered = CounterMetricFamily("reprise_deliveries", "At-least-once deliveries made since the actors "
                                    "started (stats 'delivered'; on the Spark bridge: feed rows)", labels=labels)
    stats = GaugeMetricFamily("reprise_actor_stat", "Every counter of the host's actors' stats(), summed per "
                              "host (e.g. projection_lag)", labels=[*labels, "stat"])
    histograms: dict[str, Any] = {}
    leader_node = status.config.get("node") or "leader"  # (the guardian's configuration: the leader's)
    for path, info in sorted(status.hosts.items()):
        placed = info.node or str(leader_node)
        if node is not None:
            if (info.node or (node if leader else None)) != node:
                continue
            placed = node
        values = [placed, path]
        up.add_metric(values, 1.0 if info.state == "running" else 0.0)
        restarts.add_metric(values, info.restarts)
        if info.alive is None:
            continue  # it did not answer in time: no sample rather than a counter that drops to 0
        alive.add_metric(values, info.alive)
        messages_in.add_metric(values, info.messages_in)
        messages_out.add_metric(values, info.messages_out)
        parked.add_metric(values, info.messages_parked)
        if "unconfirmed" in info.counters:
            unconfirmed.add_metric(values, info.counters["unconfirmed"])
        if "delivered" in info.counters:
            delivered.add_metric(values, info.counters["delivered"])
        for name, value in sorted(info.counters.items()):
            if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
                stats.add_metric([*values, _stat_name(name)], value)
        for name, (bounds, counts, total) in sorted(info.histograms.items()):
            family = histograms.get(name)
            if family is None:
                family = histograms[name] = HistogramMetricFamily(
                    f"reprise_{_stat_name(name)}", f"{name} per host", labels=labels)
            cumulative, buckets = 0, []
            for bound, count in zip((*bounds, math.inf), counts, strict=True):
                cumulative += count
                buckets.append(("+Inf" if bound == math.inf else repr(float(bound)), cumulative))
            family.add_metric(values, buckets, total)
    out: list[Any] = [up, alive, restarts, messages_in, messages_out, parked, unconfirmed, delivered, stats,
                      *histograms.values()]
    if leader:
        out.append(CounterMetricFamily("reprise_dead_letters", "Dead letters recorded by the guardian (the "
                                       "whole system's)", value=status.dead_letters))
    return out


class StatusCollector:
    """A prometheus_client collector that gathers the status on every scrape."""

    def __init__(self, fetch: Callable[[], SystemStatus | None], node: str | None, leader: bool) -> None:
        self.fetch = fetch
        self.node = node
        self.leader = leader

    def collect(self) -> Iterator[Any]:
        """The families of the current status; only `reprise_status_ok 0` when it could not be had."""
        from prometheus_client.core import GaugeMetricFamily

        try:
            status = self.fetch()
        except Exception:  # a scrape must answer (and say it failed) whatever the system does
            log.exception("metrics: the status could not be gathered")
            status = None
        yield GaugeMetricFamily("reprise_status_ok", "1 if this scrape got the system's status",
                                value=0.0 if status is None else 1.0)
        if status is not None:
            yield from families(status, self.node, self.leader)

    def describe(self) -> list[Any]:
        """Nothing: the families are only known on collect (the registry must not call collect at register)."""
        return []


class Endpoint:
    """A running metrics HTTP server."""

    def __init__(self, server: Any, thread: threading.Thread, host: str, port: int) -> None:
        self._server = server
        self._thread = thread
        self.host = host
        self.port = port

    def close(self) -> None:
        """Stop serving and free the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5.0)


METRICS_PATH = "/metrics"


MAX_CONNECTIONS = 16
"""Connections the endpoint serves at once: a thread each. Prometheus scrapes one at a time; any local process could
otherwise start a thread per connection it opened, in the process serving the endpoint (yours, on the in-process
base), without limit. When all are taken, a new connection closes the oldest one still sending its request."""
REQUEST_TIMEOUT = 10.0
"""Seconds a connection may take to send its whole request head, and each write of the answer, before it is closed."""
HEAD_LIMIT = 32 * 1024
"""Bytes a request head (request line and headers) may take; a scrape's takes a few hundred. A larger one is
answered 431 and closed before more of it is read."""


class _RequestRefused(Exception):
    """A request head too slow or too large: the connection is closed (`answer`, if any, sent first)."""

    def __init__(self, answer: bytes = b"") -> None:
        super().__init__(answer.decode(errors="replace"))
        self.answer = answer


class _HeadReader:
    """The connection's `rfile` while the request head is read: at most HEAD_LIMIT bytes, by one deadline in all.

    The socket timeout alone is per read, so a client sending a byte now and then held its connection (and its
    slot) for good; and http.server buffers up to 100 header lines of 64 KiB each.
    """

    def __init__(self, rfile: Any, sock: socket.socket, deadline: float) -> None:
        self._rfile = rfile
        self._sock = sock
        self._deadline = deadline
        self._left = HEAD_LIMIT
        self.head_done = False

    def readline(self, limit: int = -1) -> bytes:
        """One line, as BufferedReader.readline, refused past the deadline or the head's byte budget."""
        if self.head_done:
            return bytes(self._rfile.readline(limit))
        line = bytearray()
        while limit < 0 or len(line) < limit:
            wait = self._deadline - time.monotonic()
            if wait <= 0:
                raise _RequestRefused()
            self._sock.settimeout(wait)
            try:
                chunk = self._rfile.peek(1)  # (what is buffered, or one read of the socket: never blocks past wait)
            except OSError:  # (TimeoutError: the deadline; a reset)
                raise _RequestRefused() from None
            if not chunk:
                break
            end = chunk.find(b"\n")
            take = len(chunk) if end < 0 else end + 1
            if limit >= 0:
                take = min(take, limit - len(line))
            if take > self._left:
                raise _RequestRefused(b"HTTP/1.0 431 Request Header Fields Too Large\r\nContent-Type: text/plain\r\n"
                                      b"Connection: close\r\n\r\nrequest head larger than %d bytes: GET %s takes no "
                                      b"headers of that size\n" % (HEAD_LIMIT, METRICS_PATH.encode()))
            self._left -= take
            line += self._rfile.read(take)  # (buffered already: no read of the socket)
            if line.endswith(b"\n"):
                break
        return bytes(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._rfile, name)  # (read, close...: the WSGI input once the head is read)


class _Server(ThreadingMixIn, WSGIServer):
    """One thread per scrape (a scrape waits for the status), at most MAX_CONNECTIONS, none kept at exit."""

    daemon_threads = True
    # socketserver's 5 overflowed under a burst of connections: the kernel then dropped their handshakes' last
    # ACK and retried seconds later, so a connection beyond MAX_CONNECTIONS waited that long to be closed.
    request_queue_size = 128

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._lock = threading.Lock()
        self._reading: dict[Any, float] = {}  # connection -> when it was accepted, while its request head is read
        super().__init__(*args, **kwargs)

    def process_request(self, request: Any, client_address: Any) -> None:
        """Serve the connection in a thread of its own; when MAX_CONNECTIONS are served, close the oldest still
        sending its request to make room (or this one at once, if none is)."""
        # (Closing the new one instead, connections that sent a byte now and then kept every scrape out. A scrape
        # sends its request within a millisecond: it is not the oldest for long.)
        if not self._slots.acquire(blocking=False) and not (self._close_oldest_reading()
                                                             and self._slots.acquire(timeout=1.0)):
            self.shutdown_request(request)  # (a flood: one more thread each would cost the process without bound)
            return
        with self._lock:
            self._reading[request] = time.monotonic()
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.head_read(request)
            self._slots.release()
            raise

    def _close_oldest_reading(self) -> bool:
        """Shut the connection down that has been sending its request head the longest; False if none is."""
        with self._lock:
            if not self._reading:
                return False
            oldest = min(self._reading, key=self._reading.__getitem__)
            del self._reading[oldest]
        try:
            oldest.shutdown(socket.SHUT_RDWR)  # (its thread's read ends at once; the thread closes it and frees its slot)
        except OSError:
            pass
        return True

    def head_read(self, request: Any) -> None:
        """`request` has sent its request head (or ended): it is no longer closed to make room."""
        with self._lock:
            self._reading.pop(request, None)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        """Serve one connection; its slot is free again when it ends."""
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.head_read(request)
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Log at debug: a client that timed out or hung up must not print a traceback on the user's stderr."""
        log.debug("metrics: a connection from %s failed", client_address, exc_info=True)


class _Server6(_Server):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    timeout = REQUEST_TIMEOUT  # (StreamRequestHandler sets it on the socket: a silent client is closed)
    server: _Server

    def setup(self) -> None:
        """Read the request head through a _HeadReader (one deadline, HEAD_LIMIT bytes)."""
        super().setup()
        self.rfile = _HeadReader(self.rfile, self.connection, time.monotonic() + REQUEST_TIMEOUT)  # type: ignore[assignment]

    def parse_request(self) -> bool:
        """Parse the head as http.server does; from then on the connection is served, and not closed to make room."""
        parsed = super().parse_request()
        self.server.head_read(self.request)
        self.rfile.head_done = True  # type: ignore[attr-defined]
        self.connection.settimeout(REQUEST_TIMEOUT)  # (for the answer's writes)
        return parsed

    def handle(self) -> None:
        """Serve the one request; a head too slow or too large ends the connection (answered 431 if too large)."""
        try:
            super().handle()
        except _RequestRefused as refused:
            if refused.answer:
                try:
                    self.connection.settimeout(1.0)
                    self.wfile.write(refused.answer)
                except OSError:
                    pass

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        """Nothing: a scrape every few seconds would fill stderr."""


def _only_metrics(app: Callable[..., Any], bound: str) -> Callable[..., Any]:
    """`app` for GET /metrics (HEAD too), 404 for any other path, 405 for any other method, and 421 for a Host
    header that names another host than the endpoint bound to `bound` (see actors.http_host)."""

    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        method, path = environ.get("REQUEST_METHOD", ""), environ.get("PATH_INFO", "")
        why = http_host.refusal(environ.get("HTTP_HOST"), bound)
        if why is not None:  # (before anything else: such a page learns nothing, not even which paths exist)
            body = f"{why}\n".encode()
            start_response("421 Misdirected Request", [("Content-Type", "text/plain"),
                                                       ("Content-Length", str(len(body)))])
            return [body]
        if path != METRICS_PATH:
            body = f"not found: the metrics are at {METRICS_PATH}\n".encode()
            start_response("404 Not Found", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
            return [body]
        if method not in ("GET", "HEAD"):
            body = f"method {method} not allowed: GET {METRICS_PATH}\n".encode()
            start_response("405 Method Not Allowed", [("Content-Type", "text/plain"), ("Allow", "GET, HEAD"),
                                                      ("Content-Length", str(len(body)))])
            return [body]
        if method == "HEAD":  # prometheus_client answers HEAD with 405; a HEAD is a GET without the body
            environ = dict(environ, REQUEST_METHOD="GET")
            return [b"" for _ in app(environ, start_response)]
        return app(environ, start_response)
    return guarded


def serve(collector: StatusCollector, port: int, host: str = DEFAULT_HOST) -> Endpoint:
    """Serve `collector` in the Prometheus text format on http://host:port/metrics (nothing else); SpawnFailed
    naming the option if it cannot."""
    from prometheus_client import CollectorRegistry, make_wsgi_app

    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    # prometheus_client's start_http_server answers every path with the metrics: this one serves only
    # /metrics, so the port shows nothing but what it is for.
    try:
        server = make_server(host, port, _only_metrics(make_wsgi_app(registry), host),
                             _Server6 if ":" in host else _Server, handler_class=_QuietHandler)
    except OSError as exc:
        raise SpawnFailed(f"metrics_port {port} on metrics_host {host} cannot be served ({exc.strerror or exc}); "
                          "choose a free port (or another metrics_host)") from None
    thread = threading.Thread(target=server.serve_forever, args=(0.5,), name="reprise-metrics", daemon=True)
    thread.start()
    return Endpoint(server, thread, host, port)


# ---- the multi-process base: one server actor per node ---------------------------------------------

@dataclass(frozen=True)
class MetricsInit:
    """Boot -> metrics server: serve this node's metrics (reply MetricsReady)."""

    guardian: Address
    port: int
    host: str
    node: str
    leader: bool


@dataclass(frozen=True)
class MetricsReady:
    """Metrics server -> boot: serving, or why not."""

    error: str | None = None


class _Waiting:
    """The status shared by a scrape thread and the server actor (the actor only sets, under the lock)."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.wanted = 0  # scrapes waiting for a status newer than the one they saw
        self.status: SystemStatus | None = None
        self.generation = 0

    def fetch(self) -> SystemStatus | None:
        """A status asked for after this call began (None after SCRAPE_WAIT)."""
        with self.cond:
            seen = self.generation
            self.wanted += 1
            try:
                self.cond.wait_for(lambda: self.generation > seen, SCRAPE_WAIT)
                return self.status if self.generation > seen else None
            finally:
                self.wanted -= 1

    def publish(self, status: SystemStatus) -> None:
        with self.cond:
            self.status = status
            self.generation += 1
            self.cond.notify_all()


class MetricsServer(ThespianActor):  # type: ignore[misc]  # (Thespian has no type information)
    """Serves its node's metrics from an HTTP thread; asks the guardian for the status when a scrape waits.

    The HTTP thread cannot use Thespian (one thread per actor), so this actor looks every _POLL seconds
    whether a scrape waits, asks the guardian and hands the reply over (a lock, a condition).
    """

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.endpoint: Endpoint | None = None
        self.guardian: Address | None = None
        self.waiting = _Waiting()
        self.asked = 0.0  # time.monotonic() of the outstanding GetStatus (0: none)
        self.parent_watch: ParentWatch | None = None

    @staticmethod
    def actorSystemCapabilityCheck(capabilities: dict[str, Any], requirements: dict[str, Any] | None) -> bool:
        """On the node that asks for it."""
        wanted = (requirements or {}).get("Reprise Node")
        return wanted is None or capabilities.get("Reprise Node") == wanted

    def receiveMessage(self, message: object, sender: Address) -> None:
        if isinstance(message, SystemStatus):
            self.asked = 0.0
            self.waiting.publish(message)
        elif isinstance(message, WakeupMessage) and message.payload == PARENT_WAKEUP:
            if self.parent_watch is not None and self.parent_watch.orphaned():
                self.send(self.myAddress, ActorExitRequest())  # the admin died: stop serving a dead system
        elif isinstance(message, WakeupMessage):
            now = time.monotonic()
            if self.waiting.wanted and (not self.asked or now - self.asked > SCRAPE_WAIT):
                self.asked = now
                self.send(self.guardian, GetStatus())
            self.wakeupAfter(timedelta(seconds=_POLL), _POLL_WAKEUP)
        elif isinstance(message, MetricsInit):
            self._init(message, sender)
        elif isinstance(message, ActorExitRequest):
            if self.endpoint is not None:
                self.endpoint.close()
                self.endpoint = None

    def _init(self, init: MetricsInit, sender: Address) -> None:
        self.guardian = init.guardian
        try:
            self.endpoint = serve(StatusCollector(self.waiting.fetch, init.node, init.leader), init.port, init.host)
        except SpawnFailed as exc:
            self.send(sender, MetricsReady(str(exc)))
            return
        self.wakeupAfter(timedelta(seconds=_POLL), _POLL_WAKEUP)
        self.parent_watch = ParentWatch.start(self)
        self.send(sender, MetricsReady())
