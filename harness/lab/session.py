"""A scenario's remote store: the [remote] table read and checked, and the session that starts what
it needs (the shaped link, the object server inside it, the AWS environment pointing at it) and
stops all of it on any exit.

    [remote]
    latency_ms = 20        # added round trip (half each way); needs the kernel's netem
    bandwidth_mb_s = 200   # MB/s each way (10^6 bytes); 0: unlimited
    loss_pct = 0           # % of packets dropped each way; needs netem
    bucket = "dlbench"     # the bucket the project's server creates; the storages' url names it
    namespace = true       # the server in a network namespace of ours (false: loopback, unshaped)

``session(settings)`` is a context manager: with ``namespace`` it creates a ShapedLink
(harness.lab.link) and starts the ObjectServer (harness.lab.server) inside it on the namespace's
address, else on loopback; sets the AWS environment (endpoint, region, keys) in ``os.environ`` so
the ranks it starts inherit it; measures the server's own cost per request; and on leaving (an
exception, SIGTERM or SIGINT: ``stop_on_signals``) stops the server, removes the link and puts the
environment back. ``Session.header()`` is the lines a run's header prints: the shape, the qdiscs as
tc shows them, the server's own cost.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import UsageError
from harness.lab.link import Shape, ShapedLink, missing_tools, remove_dead
from harness.lab.server import (
    ENV_KEYS,
    ObjectServer,
    RequestCost,
    remove_dead_logs,
    request_cost,
    stop_on_signals,
)

FIELDS: dict[str, tuple[type, Any]] = {"latency_ms": (float, 0.0), "bandwidth_mb_s": (float, 0.0),
                                       "loss_pct": (float, 0.0), "bucket": (str, "dlbench"),
                                       "namespace": (bool, True)}


@dataclass(frozen=True)
class RemoteSettings:
    shape: Shape = Shape()
    bucket: str = "dlbench"
    namespace: bool = True
    source: str = ""  # the scenario file, for messages


def settings(path: Path | str, raw: Any) -> RemoteSettings | None:
    """The [remote] table typed and checked (None when the scenario has none); one line per
    mistake."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise UsageError(f"{path}: remote must be a table [remote] with {', '.join(FIELDS)}")
    unknown = sorted(set(raw) - set(FIELDS))
    if unknown:
        raise UsageError(f"{path}: unknown field [remote] {unknown[0]}; known: {', '.join(FIELDS)}")
    values = {}
    for key, (kind, default) in FIELDS.items():
        value = raw.get(key, default)
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or (kind is float and isinstance(value, bool)):
            raise UsageError(f"{path} [remote] {key} = {value!r} must be of type {kind.__name__}")
        if kind is float and not 0 <= value < float("inf"):
            raise UsageError(f"{path} [remote] {key} = {value!r} must be zero or more")
        values[key] = value
    if values["loss_pct"] >= 100:
        raise UsageError(f"{path} [remote] loss_pct = {values['loss_pct']:g} must be below 100 (no byte would "
                         f"arrive); give a percentage such as 0.1")
    bucket = values["bucket"]
    if not (3 <= len(bucket) <= 63 and bucket.replace("-", "").replace(".", "").isalnum() and bucket.islower()):
        raise UsageError(f"{path} [remote] bucket = {bucket!r} is not a valid S3 bucket name; use 3-63 lowercase "
                         f"letters, digits, dots or hyphens")
    shape = Shape(values["latency_ms"], values["bandwidth_mb_s"], values["loss_pct"])
    if not values["namespace"] and shape != Shape():
        raise UsageError(f"{path} [remote] namespace = false puts the server on loopback, which is never shaped "
                         f"(the ranks' own traffic crosses it); set namespace = true or the shape to 0")
    return RemoteSettings(shape, bucket, values["namespace"], str(path))


@dataclass
class Session:
    settings: RemoteSettings
    server: ObjectServer
    link: ShapedLink | None = None
    cost: RequestCost | None = None
    env: dict[str, str] = field(default_factory=dict)

    def header(self) -> list[str]:
        where = (f"object store: moto at {self.server.endpoint} in namespace {self.link.netns}" if self.link
                 else f"object store: moto at {self.server.endpoint} on loopback")
        lines = [f"{where}, bucket {self.settings.bucket}; link: {self.settings.shape.label()}"]
        if self.link is not None and self.link.qdisc:
            lines.append("qdiscs: " + " | ".join(self.link.qdiscs()))
        if self.cost is not None:
            lines.append(self.cost.line())
        return lines


@contextmanager
def session(remote: RemoteSettings, measure_cost: bool = True) -> Iterator[Session]:
    """Link, server and environment for the scenario's remote store; all stopped on any exit."""
    saved = {k: os.environ.get(k) for k in ENV_KEYS}
    with stop_on_signals():
        try:
            link = ShapedLink(remote.shape) if remote.namespace else None
        except UsageError as err:
            raise UsageError(f"{remote.source}: {err}" if remote.source else str(err)) from None
        try:
            if link is not None:
                link.create()
                server = ObjectServer(remote.bucket, host=link.server_ip, netns=link.netns)
            else:
                server = ObjectServer(remote.bucket)
            with server:
                os.environ.update(server.env())
                cost = request_cost(server) if measure_cost else None
                yield Session(remote, server, link, cost, server.env())
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            if link is not None:
                link.remove()


def remove_dead_runs() -> list[str]:
    """What killed remote runs left (their namespaces and links where this process may remove them:
    root with ip; their moto logs), removed before any run; one line each. A live run's are never
    touched."""
    removed = [] if missing_tools() else remove_dead()
    return removed + [f"log {p}" for p in remove_dead_logs()]
