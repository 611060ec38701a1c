#!/usr/bin/python3
"""A minimal Python client of tlpd, using only stubs generated from proto/tlp/v1/tlp.proto.

Generate the stubs first (Debian's protoc and grpc_python_plugin; grpc_tools' bundled protoc is
too old for proto3 `optional`):

    bash client/python/generate.sh OUT_DIR
    PYTHONPATH=OUT_DIR /usr/bin/python3 client/python/tlp_client.py --address 127.0.0.1:50051

It streams a few events, scores a link and prints the representation metrics.
"""
import argparse
import sys

import grpc

from tlp.v1 import tlp_pb2, tlp_pb2_grpc


class TlpClient:
    def __init__(self, address: str, timeout: float = 10.0):
        self.channel = grpc.insecure_channel(address)
        self.stub = tlp_pb2_grpc.TemporalLinkPredictionStub(self.channel)
        self.timeout = timeout

    def ingest(self, events):
        """Streams (src, dst, ts, event_id) tuples; returns the IngestSummary."""
        messages = (tlp_pb2.EdgeEvent(src=s, dst=d, ts=t, event_id=i) for s, d, t, i in events)
        return self.stub.IngestEvents(messages, timeout=self.timeout)

    def score(self, pairs, at: float = 0.0):
        request = tlp_pb2.ScoreRequest(
            queries=[tlp_pb2.LinkQuery(src=s, dst=d, at=at) for s, d in pairs])
        return self.stub.ScoreLinks(request, timeout=self.timeout).scores

    def top_k(self, src: int, k: int):
        return self.stub.TopK(tlp_pb2.TopKRequest(src=src, k=k), timeout=self.timeout).results

    def info(self):
        return self.stub.GetModelInfo(tlp_pb2.ModelInfoRequest(), timeout=self.timeout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", default="127.0.0.1:50051")
    args = parser.parse_args()
    client = TlpClient(args.address)
    summary = client.ingest([(1, 2, 10.0, "py-1"), (1, 3, 11.0, "py-2"), (2, 3, 12.0, "py-3")])
    print(f"ingested: accepted={summary.accepted} duplicates={summary.duplicates}")
    for score in client.score([(1, 2), (1, 3)]):
        m = score.src_metrics
        print(f"{score.src} -> {score.dst}: p={score.probability:.4f} "
              f"norm={m.representation_norm:.3f} ess={m.effective_neighbors:.2f} "
              f"mass={m.attention_mass:.3f} k={m.neighbors_used}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
