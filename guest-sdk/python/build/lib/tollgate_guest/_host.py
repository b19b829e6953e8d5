"""The host imports: log, config and fetch (wasi:http, synchronous)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable, List, Mapping, Optional, Tuple, Union
from urllib.parse import urlsplit

try:
    from componentize_py_types import Err, Ok
    from wit_world.imports import config as _config
    from wit_world.imports import log as _log
    from wit_world.imports import outgoing_handler as _handler
    from wit_world.imports import streams as _streams
    from wit_world.imports import wasi_http_types as _http

    _IN_COMPONENT = True
except ImportError:  # imported outside a component (unit tests of handlers)
    _IN_COMPONENT = False


class _Log:
    """``log.info("…")`` and friends write to the host's log (it bounds length and count)."""

    def _emit(self, level: str, message: str) -> None:
        if _IN_COMPONENT:
            _log.emit(_log.Level[level.upper()], str(message))

    def trace(self, message: str) -> None:
        self._emit("trace", message)

    def debug(self, message: str) -> None:
        self._emit("debug", message)

    def info(self, message: str) -> None:
        self._emit("info", message)

    def warn(self, message: str) -> None:
        self._emit("warn", message)

    def error(self, message: str) -> None:
        self._emit("error", message)


log = _Log()

#: What ``config`` returns outside a component (unit tests of handlers).
TEST_CONFIG: dict[str, str] = {}


def config(key: str) -> Optional[str]:
    """The value of ``key`` when the component's manifest grants it and a value is set."""
    if not _IN_COMPONENT:
        return TEST_CONFIG.get(key)
    return _config.get(key)


class HTTPError(Exception):
    """A request that got no response. ``code`` is the wasi:http ``error-code`` case, such as
    ``HTTP-request-denied`` (the host's allow-list refused the destination) or
    ``connection-refused``."""

    def __init__(self, code: str, message: str = ""):
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code

    @property
    def denied(self) -> bool:
        """The host refused the request by policy."""
        return self.code == "HTTP-request-denied"


@dataclass
class Response:
    status: int
    headers: List[Tuple[str, str]]
    body: bytes

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.body)


# The cases of wasi:http/types.error-code, in WIT spelling; componentize-py names their classes
# ErrorCode_<each dash-separated word capitalized> (HTTP-request-denied: ErrorCode_HttpRequestDenied).
_ERROR_CODES = [
    "DNS-timeout", "DNS-error", "destination-not-found", "destination-unavailable",
    "destination-IP-prohibited", "destination-IP-unroutable", "connection-refused",
    "connection-terminated", "connection-timeout", "connection-read-timeout",
    "connection-write-timeout", "connection-limit-reached", "TLS-protocol-error",
    "TLS-certificate-error", "TLS-alert-received", "HTTP-request-denied",
    "HTTP-request-length-required", "HTTP-request-body-size", "HTTP-request-method-invalid",
    "HTTP-request-URI-invalid", "HTTP-request-URI-too-long", "HTTP-request-header-section-size",
    "HTTP-request-header-size", "HTTP-request-trailer-section-size", "HTTP-request-trailer-size",
    "HTTP-response-incomplete", "HTTP-response-header-section-size", "HTTP-response-header-size",
    "HTTP-response-body-size", "HTTP-response-trailer-section-size", "HTTP-response-trailer-size",
    "HTTP-response-transfer-coding", "HTTP-response-content-coding", "HTTP-response-timeout",
    "HTTP-upgrade-failed", "HTTP-protocol-error", "loop-detected", "configuration-error",
    "internal-error",
]
_BY_CLASS = {"ErrorCode_" + "".join(w.capitalize() for w in c.split("-")): c for c in _ERROR_CODES}


def _code_name(err: Any) -> Tuple[str, str]:
    """The WIT case name of an ErrorCode_* value and its text, if any."""
    name = _BY_CLASS.get(type(err).__name__, "internal-error")
    detail = getattr(err, "value", None)
    return name, detail if isinstance(detail, str) else ""


_METHODS = {
    "GET": "Get", "HEAD": "Head", "POST": "Post", "PUT": "Put", "DELETE": "Delete",
    "CONNECT": "Connect", "OPTIONS": "Options", "TRACE": "Trace", "PATCH": "Patch",
}


def fetch(
    url: str,
    method: str = "GET",
    headers: Union[Mapping[str, str], Iterable[Tuple[str, str]], None] = None,
    body: Union[bytes, str, None] = None,
) -> Response:
    """Sends one HTTP request through wasi:http and returns the whole response. A non-2xx status
    is not an error. Raises ``HTTPError`` when there is no response (denied, refused, …)."""
    if not _IN_COMPONENT:
        raise HTTPError("internal-error", "fetch works only inside a tool component")
    parts = urlsplit(url)
    if not parts.scheme or not parts.netloc:
        raise HTTPError("HTTP-request-URI-invalid", url)
    pairs = list(headers.items()) if isinstance(headers, Mapping) else list(headers or [])
    data = body.encode() if isinstance(body, str) else (body or b"")
    # A body goes with its Content-Length (without one, the host would send it chunked).
    if data and not any(k.lower() == "content-length" for k, _ in pairs):
        pairs.append(("content-length", str(len(data))))

    try:
        fields = _http.Fields.from_list([(k.lower(), v.encode()) for k, v in pairs])
    except Err as e:
        raise HTTPError("HTTP-request-header-size", f"invalid header ({type(e.value).__name__})")
    req = _http.OutgoingRequest(fields)
    m = method.upper()
    req.set_method(getattr(_http, "Method_" + _METHODS[m])() if m in _METHODS else _http.Method_Other(m))
    s = parts.scheme.lower()
    req.set_scheme(_http.Scheme_Http() if s == "http" else _http.Scheme_Https() if s == "https" else _http.Scheme_Other(s))
    req.set_authority(parts.netloc)
    req.set_path_with_query((parts.path or "/") + (f"?{parts.query}" if parts.query else ""))
    out_body = req.body()
    try:
        future = _handler.handle(req, None)
    except Err as e:
        raise HTTPError(*_code_name(e.value))
    # When the host refused the request, writing the body fails and the response future holds
    # the reason, which is what the caller needs to see: so wait for the future either way.
    write_error: Optional[HTTPError] = None
    try:
        with out_body.write() as stream:
            for i in range(0, len(data), 4096):
                stream.blocking_write_and_flush(data[i : i + 4096])
        _http.OutgoingBody.finish(out_body, None)
    except Err as e:
        write_error = HTTPError("HTTP-request-body-size", f"writing the request body failed ({type(e.value).__name__})")

    with future:
        got = future.get()
        if got is None:
            with future.subscribe() as pollable:
                pollable.block()
            got = future.get()
    # Optional[Result[Result[IncomingResponse, ErrorCode], None]]
    if got is None or not isinstance(got, Ok):
        raise HTTPError("internal-error", "response not available")
    if not isinstance(got.value, Ok):
        raise HTTPError(*_code_name(got.value.value))
    if write_error is not None:
        raise write_error
    with got.value.value as resp:
        status = resp.status()
        with resp.headers() as h:
            resp_headers = [(k, v.decode("latin-1")) for k, v in h.entries()]
        with resp.consume() as in_body:
            chunks = []
            with in_body.stream() as stream:
                while True:
                    try:
                        chunks.append(stream.blocking_read(65536))
                    except Err as e:
                        if isinstance(e.value, _streams.StreamError_Closed):
                            break
                        raise HTTPError("HTTP-response-incomplete", "reading the body failed")
    return Response(status, resp_headers, b"".join(chunks))
