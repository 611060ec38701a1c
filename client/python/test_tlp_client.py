#!/usr/bin/python3
"""Proof that the API is usable from Python without our C++ code: ingest, duplicates, scores,
top-k and model info against a running tlpd (address in argv[1])."""
import sys
import unittest

import grpc

from tlp_client import TlpClient
from tlp.v1 import tlp_pb2

ADDRESS = sys.argv.pop(1) if len(sys.argv) > 1 else "127.0.0.1:50051"


class PythonClientTest(unittest.TestCase):
    def test_ingest_score_topk(self):
        client = TlpClient(ADDRESS)
        events = [(10 + i % 4, 100 + i % 3, float(i), f"py-{i}") for i in range(60)]
        summary = client.ingest(events)
        self.assertEqual(summary.accepted, 60)
        self.assertEqual(client.ingest(events).duplicates, 60)
        scores = client.score([(10, 100), (999, 100)])
        self.assertEqual(len(scores), 2)
        self.assertTrue(0.0 < scores[0].probability < 1.0)
        self.assertEqual(scores[0].src_metrics.neighbors_used, 10)
        self.assertTrue(scores[1].src_metrics.cold_start)
        top = client.top_k(10, 2)
        self.assertEqual(len(top), 2)
        self.assertGreaterEqual(top[0].probability, top[1].probability)
        self.assertEqual(client.info().events_applied, 0)  # chunk of 200 still open

    def test_bad_input_names_the_field(self):
        client = TlpClient(ADDRESS)
        with self.assertRaises(grpc.RpcError) as caught:
            client.stub.IngestBatch(tlp_pb2.IngestBatchRequest(
                events=[tlp_pb2.EdgeEvent(src=1, dst=2, ts=float("nan"))]), timeout=10)
        self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("'ts'", caught.exception.details())


if __name__ == "__main__":
    unittest.main()
