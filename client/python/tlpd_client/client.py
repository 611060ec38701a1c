"""A typed client of tlpd's tlp.v1 API: ingest, score, topk, node, info, health.

Every call has a deadline (`timeout`), and every failure is raised as TlpdError carrying the gRPC
status code and the daemon's message (which names the bad field). Ingest sends batches and
retries the ones the daemon refused for load (RESOURCE_EXHAUSTED, after the `retry-after-ms` it
suggests), and, when every event of a batch has an event_id (so a retry cannot store an event
twice), the ones lost to UNAVAILABLE.
"""
from __future__ import annotations

import dataclasses
import enum
import pathlib
import time
from typing import Any, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import grpc

from tlp.v1 import tlp_pb2, tlp_pb2_grpc
from tlpd_client.health.v1 import health_pb2, health_pb2_grpc


class TlpdError(Exception):
    """A failed call: `code` (grpc.StatusCode), `message` (the daemon's, naming the field), and
    for ingest `summary`, what the batches before the failed one stored."""

    def __init__(self, code: grpc.StatusCode, message: str,
                 summary: Optional["IngestSummary"] = None):
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message
        self.summary = summary


@dataclasses.dataclass(frozen=True)
class Event:
    src: int
    dst: int
    ts: float  # seconds
    event_id: str = ""  # makes retries idempotent: a re-sent id is counted, not stored again
    features: Tuple[float, ...] = ()
    state_label: Optional[int] = None  # src's state after the event (0 or 1), for --node-state


@dataclasses.dataclass(frozen=True)
class IngestSummary:
    accepted: int = 0
    duplicates: int = 0
    rejected: int = 0
    last_sequence: int = 0


@dataclasses.dataclass(frozen=True)
class RepresentationMetrics:
    representation_norm: float
    effective_neighbors: float
    attention_mass: float
    attention_entropy: float
    neighbors_used: int
    cold_start: bool


@dataclasses.dataclass(frozen=True)
class LinkScore:
    src: int
    dst: int
    at: float
    probability: float
    logit: float
    src_metrics: RepresentationMetrics
    dst_metrics: RepresentationMetrics


@dataclasses.dataclass(frozen=True)
class NodeStateScore:
    node: int
    at: float
    probability: float  # P(state label = 1)
    logit: float
    metrics: RepresentationMetrics


@dataclasses.dataclass(frozen=True)
class Neighbor:
    node: int
    ts: float
    sequence: int


@dataclasses.dataclass(frozen=True)
class NodeState:
    node: int
    known: bool
    degree: int
    last_update_ts: float
    memory: List[float]
    recent: List[Neighbor]


@dataclasses.dataclass(frozen=True)
class ModelInfo:
    architecture: str
    attention_p: float
    fingerprint: str
    device: str
    embedding_dim: int
    memory_dim: int
    edge_feature_dim: int
    neighbors: int
    events_applied: int
    watermark: int
    version: str
    node_state: bool  # the model has a node-state head (score_node_states)
    outcome_attention: str  # "shared" or "indexed" with one, else ""


@dataclasses.dataclass(frozen=True)
class RefreshStatus:
    """The scheduled (or requested) model refresh: whether one runs, and what the last found."""
    running: bool
    refreshes: int
    promotions: int
    failures: int
    last_outcome: str  # "promoted", "kept" or "failed" ("" before the first)
    last_error: str
    candidate_mrr: float  # one-vs-all MRR of the new and the serving model on the same
    serving_mrr: float    # held-back events
    held_back_queries: int
    candidate_fingerprint: str
    serving_fingerprint: str
    last_seconds: float


@dataclasses.dataclass(frozen=True)
class ModelStatus:
    """The serving model, the one it replaced, and any load in progress (tlp.v1.Admin)."""
    fingerprint: str
    checkpoint: str
    previous_fingerprint: str
    previous_checkpoint: str
    phase: str  # "idle", "replaying", "committed", "swapped"
    loading_fingerprint: str
    loading_checkpoint: str
    replayed_events: int
    target_events: int
    last_error: str  # why the last load failed ("" when it did not)
    swaps: int
    rollbacks: int
    last_swap_seconds: float
    last_hold_seconds: float
    refresh: RefreshStatus


class Ranker(enum.Enum):
    """Who ranks a TopK: the model, or a built-in baseline for A/B comparisons."""
    MODEL = tlp_pb2.RANKER_MODEL
    RECENCY_POPULARITY = tlp_pb2.RANKER_RECENCY_POPULARITY
    EDGEBANK = tlp_pb2.RANKER_EDGEBANK
    POPULARITY = tlp_pb2.RANKER_POPULARITY


EventLike = Union[Event, Tuple[Any, ...], dict]
_RETRIED_FOR_LOAD = grpc.StatusCode.RESOURCE_EXHAUSTED


def _read(value: Union[None, bytes, str, pathlib.Path]) -> Optional[bytes]:
    if value is None or isinstance(value, bytes):
        return value
    return pathlib.Path(value).read_bytes()


def _metrics(m: tlp_pb2.RepresentationMetrics) -> RepresentationMetrics:
    return RepresentationMetrics(m.representation_norm, m.effective_neighbors, m.attention_mass,
                                 m.attention_entropy, m.neighbors_used, m.cold_start)


def _score(s: tlp_pb2.LinkScore) -> LinkScore:
    return LinkScore(s.src, s.dst, s.at, s.probability, s.logit, _metrics(s.src_metrics),
                     _metrics(s.dst_metrics))


def _model_status(r: tlp_pb2.ModelStatusResponse) -> ModelStatus:
    f = r.refresh
    refresh = RefreshStatus(f.running, f.refreshes, f.promotions, f.failures, f.last_outcome,
                            f.last_error, f.candidate_mrr, f.serving_mrr, f.held_back_queries,
                            f.candidate_fingerprint, f.serving_fingerprint, f.last_seconds)
    return ModelStatus(r.fingerprint, r.checkpoint, r.previous_fingerprint,
                       r.previous_checkpoint, r.phase, r.loading_fingerprint,
                       r.loading_checkpoint, r.replayed_events, r.target_events, r.last_error,
                       r.swaps, r.rollbacks, r.last_swap_seconds, r.last_hold_seconds, refresh)


def _to_event(event: EventLike) -> tlp_pb2.EdgeEvent:
    if isinstance(event, Event):
        return tlp_pb2.EdgeEvent(src=event.src, dst=event.dst, ts=event.ts,
                                 event_id=event.event_id, features=event.features,
                                 state_label=event.state_label)
    if isinstance(event, dict):
        label = event.get("state_label")
        return tlp_pb2.EdgeEvent(src=int(event["src"]), dst=int(event["dst"]),
                                 ts=float(event["ts"]), event_id=str(event.get("event_id", "")),
                                 features=list(event.get("features", ())),
                                 state_label=None if label is None else int(label))
    src, dst, ts, *rest = event  # (src, dst, ts[, event_id[, features]])
    return tlp_pb2.EdgeEvent(src=int(src), dst=int(dst), ts=float(ts),
                             event_id=str(rest[0]) if rest else "",
                             features=list(rest[1]) if len(rest) > 1 else [])


def _rows(events: Any) -> Iterator[EventLike]:
    """Rows of a pandas DataFrame (columns src, dst, ts, optionally event_id and features) or
    the items of any other iterable."""
    if hasattr(events, "to_dict") and hasattr(events, "columns"):
        missing = {"src", "dst", "ts"} - set(events.columns)
        if missing:
            raise ValueError(f"DataFrame lacks column(s) {sorted(missing)}")
        yield from events.to_dict("records")
    else:
        yield from events


class Client:
    """One channel to a tlpd. Thread-safe (gRPC channels are); use as a context manager or
    call close().

    address: host:port. timeout: seconds per call. token: a bearer token (`--token-file` on the
    daemon); admin_token: the one for model changes (`--admin-token-file`; default token).
    TLS: root_certificates (the CA the daemon's certificate chains to), and for mutual
    TLS certificate_chain and private_key; each bytes or a file path; tls=True with none of them
    uses the system's roots. server_name overrides the name checked against the certificate.
    max_attempts: tries per ingest batch when the daemon is busy (RESOURCE_EXHAUSTED).
    """

    def __init__(self, address: str = "127.0.0.1:50051", *, timeout: float = 10.0,
                 token: Optional[str] = None, admin_token: Optional[str] = None,
                 tls: bool = False,
                 root_certificates: Union[None, bytes, str, pathlib.Path] = None,
                 certificate_chain: Union[None, bytes, str, pathlib.Path] = None,
                 private_key: Union[None, bytes, str, pathlib.Path] = None,
                 server_name: Optional[str] = None, max_attempts: int = 8):
        options = [("grpc.max_send_message_length", 64 << 20),
                   ("grpc.max_receive_message_length", 64 << 20)]
        if server_name:
            options.append(("grpc.ssl_target_name_override", server_name))
        if tls or root_certificates or certificate_chain:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=_read(root_certificates), private_key=_read(private_key),
                certificate_chain=_read(certificate_chain))
            self._channel = grpc.secure_channel(address, credentials, options=options)
        else:
            self._channel = grpc.insecure_channel(address, options=options)
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        admin_token = admin_token or token
        self._admin_metadata = ((("authorization", f"Bearer {admin_token}"),)
                                if admin_token else ())
        self._stub = tlp_pb2_grpc.TemporalLinkPredictionStub(self._channel)
        self._admin = tlp_pb2_grpc.AdminStub(self._channel)
        self._health = health_pb2_grpc.HealthStub(self._channel)
        self._timeout = timeout
        self._max_attempts = max(1, max_attempts)
        self.retries = 0  # ingest batches re-sent so far

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def _call(self, method, request, metadata=None):
        try:
            return method(request, timeout=self._timeout,
                          metadata=self._metadata if metadata is None else metadata)
        except grpc.RpcError as error:
            raise TlpdError(error.code(), error.details() or "") from None

    # --- ingest -------------------------------------------------------------------------------

    def ingest(self, events: Union[Iterable[EventLike], Any], *,
               batch_size: int = 10_000) -> IngestSummary:
        """Stores events durably, in batches of batch_size (at most the daemon's
        --max-batch-events). events: Event objects, (src, dst, ts[, event_id[, features]])
        tuples, dicts, or a pandas DataFrame with columns src, dst, ts (and optionally event_id,
        features). Returns the totals; raises TlpdError (with .summary of what was stored)."""
        total = IngestSummary()
        batch: List[tlp_pb2.EdgeEvent] = []

        def flush() -> None:
            nonlocal total
            try:
                summary = self._ingest_batch(batch)
            except TlpdError as error:
                error.summary = total
                raise
            total = IngestSummary(total.accepted + summary.accepted,
                                  total.duplicates + summary.duplicates,
                                  total.rejected + summary.rejected, summary.last_sequence)
            batch.clear()

        for row in _rows(events):
            batch.append(_to_event(row))
            if len(batch) >= batch_size:
                flush()
        if batch:
            flush()
        return total

    def _ingest_batch(self, events: Sequence[tlp_pb2.EdgeEvent]) -> IngestSummary:
        request = tlp_pb2.IngestBatchRequest(events=events)
        idempotent = all(event.event_id for event in events)
        delay = 0.05
        for attempt in range(1, self._max_attempts + 1):
            try:
                s = self._stub.IngestBatch(request, timeout=self._timeout,
                                           metadata=self._metadata)
                return IngestSummary(s.accepted, s.duplicates, s.rejected, s.last_sequence)
            except grpc.RpcError as error:
                retry = error.code() == _RETRIED_FOR_LOAD or (
                    idempotent and error.code() == grpc.StatusCode.UNAVAILABLE)
                if not retry or attempt == self._max_attempts:
                    raise TlpdError(error.code(), error.details() or "") from None
                hint = dict(error.trailing_metadata() or ()).get("retry-after-ms")
                time.sleep(int(hint) / 1000 if hint else delay)
                delay = min(delay * 2, 2.0)
                self.retries += 1
        raise AssertionError("unreachable")

    # --- queries ------------------------------------------------------------------------------

    def score(self, pairs: Iterable[Tuple[int, int]], at: float = 0.0) -> List[LinkScore]:
        """Scores (src, dst) links at time `at` (0 = now, after every stored event)."""
        request = tlp_pb2.ScoreRequest(
            queries=[tlp_pb2.LinkQuery(src=s, dst=d, at=at) for s, d in pairs])
        return [_score(s) for s in self._call(self._stub.ScoreLinks, request).scores]

    def topk(self, src: int, k: int = 10, *, at: float = 0.0,
             candidates: Optional[Iterable[int]] = None, exclude_seen: bool = False,
             ranker: Ranker = Ranker.MODEL) -> List[LinkScore]:
        """The k destinations `src` most likely meets at `at`, best first: among `candidates`,
        or every destination seen so far."""
        request = tlp_pb2.TopKRequest(src=src, k=k, at=at, candidates=list(candidates or ()),
                                      exclude_seen=exclude_seen, ranker=ranker.value)
        return [_score(s) for s in self._call(self._stub.TopK, request).results]

    def score_node_states(self, nodes: Iterable[int], at: float = 0.0) -> List[NodeStateScore]:
        """Scores nodes' state (the second outcome of a model trained with `tlpd train
        --node-state`) at time `at` (0 = now); FAILED_PRECONDITION without that head."""
        request = tlp_pb2.ScoreNodeStatesRequest(
            queries=[tlp_pb2.NodeStateQuery(node=n, at=at) for n in nodes])
        return [NodeStateScore(s.node, s.at, s.probability, s.logit, _metrics(s.metrics))
                for s in self._call(self._stub.ScoreNodeStates, request).scores]

    def node(self, node: int, recent_neighbors: int = 10) -> NodeState:
        r = self._call(self._stub.GetNodeState,
                       tlp_pb2.NodeStateRequest(node=node, recent_neighbors=recent_neighbors))
        return NodeState(r.node, r.known, r.degree, r.last_update_ts, list(r.memory),
                         [Neighbor(n.node, n.ts, n.sequence) for n in r.recent])

    def info(self) -> ModelInfo:
        r = self._call(self._stub.GetModelInfo, tlp_pb2.ModelInfoRequest())
        return ModelInfo(r.architecture, r.attention_p, r.fingerprint, r.device, r.embedding_dim,
                         r.memory_dim, r.edge_feature_dim, r.neighbors, r.events_applied,
                         r.watermark, r.version, r.node_state, r.outcome_attention)

    def health(self, service: str = "") -> str:
        """The daemon's health: SERVING, or NOT_SERVING while it starts (trains its first
        model, replays its log) or drains."""
        response = self._call(self._health.Check, health_pb2.HealthCheckRequest(service=service))
        return health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)

    # --- model changes (tlp.v1.Admin) ---------------------------------------------------------

    def model_status(self) -> ModelStatus:
        return _model_status(self._call(self._admin.GetModelStatus, tlp_pb2.ModelStatusRequest(),
                                        self._admin_metadata))

    def load_model(self, checkpoint: str, *, wait: bool = False,
                   poll_seconds: float = 0.2) -> ModelStatus:
        """Loads `checkpoint` (a path on the daemon's machine) and swaps it in once its memory
        caught up with the log. wait: return once it serves, raising TlpdError (ABORTED) when
        the load failed."""
        status = _model_status(self._call(self._admin.LoadModel,
                                          tlp_pb2.LoadModelRequest(checkpoint=str(checkpoint)),
                                          self._admin_metadata))
        return self._wait(status, poll_seconds) if wait else status

    def rollback(self, *, wait: bool = False, poll_seconds: float = 0.2) -> ModelStatus:
        """Loads the model the last swap replaced, the same way."""
        status = _model_status(self._call(self._admin.Rollback, tlp_pb2.RollbackRequest(),
                                          self._admin_metadata))
        return self._wait(status, poll_seconds) if wait else status

    def refresh_model(self, *, wait: bool = False, poll_seconds: float = 0.5) -> ModelStatus:
        """Retrains the serving model's architecture on the newest stored events and swaps the
        new model in only if it ranks the newest held-back events better (status.refresh says
        what it found). wait: until the refresh, and the load it may start, ended."""
        status = _model_status(self._call(self._admin.RefreshModel,
                                          tlp_pb2.RefreshModelRequest(), self._admin_metadata))
        return self._wait(status, poll_seconds) if wait else status

    def _wait(self, status: ModelStatus, poll_seconds: float) -> ModelStatus:
        while status.refresh.running or status.phase != "idle":
            time.sleep(poll_seconds)
            status = self.model_status()
        if status.last_error or status.refresh.last_outcome == "failed":
            raise TlpdError(grpc.StatusCode.ABORTED,
                            status.last_error or status.refresh.last_error)
        return status
