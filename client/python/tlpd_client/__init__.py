"""tlpd_client: a typed Python client of tlpd (see client.py)."""
from tlpd_client.client import (Client, Event, IngestSummary, LinkScore, ModelInfo, ModelStatus,
                                Neighbor, NodeState, Ranker, RefreshStatus,
                                RepresentationMetrics, TlpdError)

__all__ = ["Client", "Event", "IngestSummary", "LinkScore", "ModelInfo", "ModelStatus",
           "Neighbor", "NodeState", "Ranker", "RefreshStatus", "RepresentationMetrics",
           "TlpdError"]
