#!/usr/bin/python3
"""tlpd_client against real daemons (tests/python_client_test.sh starts them): PLAIN_ADDRESS, a
plaintext daemon admitting one ingest call at a time, and SECURE_ADDRESS, one with mutual TLS
and bearer tokens (credentials in CERT_DIR) but no admin token; MODEL_B, a second checkpoint
the plaintext daemon can load."""
import os
import pathlib
import threading
import unittest

import grpc
import pandas as pd

from tlpd_client import Client, Event, Ranker, TlpdError

PLAIN = os.environ["PLAIN_ADDRESS"]
SECURE = os.environ["SECURE_ADDRESS"]
CERTS = pathlib.Path(os.environ["CERT_DIR"])
MODEL_B = os.environ["MODEL_B"]


class IngestTest(unittest.TestCase):
    def test_tuples_events_and_dicts_with_ids_are_stored_once(self):
        with Client(PLAIN) as client:
            tuples = [(10 + i % 4, 100 + i % 3, float(i), f"tuple-{i}") for i in range(60)]
            self.assertEqual(client.ingest(tuples).accepted, 60)
            again = client.ingest(tuples)
            self.assertEqual((again.accepted, again.duplicates), (0, 60))
            events = [Event(20, 100, 60.0 + i, f"event-{i}") for i in range(5)]
            dicts = [{"src": 21, "dst": 101, "ts": 70.0, "event_id": "dict-0"}]
            self.assertEqual(client.ingest(events).accepted, 5)
            self.assertEqual(client.ingest(dicts).accepted, 1)

    def test_dataframe(self):
        frame = pd.DataFrame({"src": [30, 31, 30], "dst": [102, 102, 103],
                              "ts": [80.0, 81.0, 82.0], "event_id": ["df-0", "df-1", "df-2"]})
        with Client(PLAIN) as client:
            summary = client.ingest(frame, batch_size=2)
            self.assertEqual(summary.accepted, 3)
            self.assertGreater(summary.last_sequence, 0)
            with self.assertRaisesRegex(ValueError, "ts"):
                client.ingest(frame.drop(columns=["ts"]))

    def test_a_busy_daemon_is_retried_until_every_batch_is_stored(self):
        # The daemon admits one ingest call at a time: four writers at once are refused with
        # RESOURCE_EXHAUSTED now and then, and the client re-sends.
        clients = [Client(PLAIN) for _ in range(4)]
        accepted = [0] * 4

        def write(index):
            events = [(40 + index, 104, 100.0 + i, f"busy-{index}-{i}") for i in range(2000)]
            accepted[index] = clients[index].ingest(events, batch_size=25).accepted

        threads = [threading.Thread(target=write, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.assertEqual(accepted, [2000] * 4)
        self.assertGreater(sum(client.retries for client in clients), 0)
        for client in clients:
            client.close()

    def test_errors_carry_the_code_the_field_and_what_was_stored(self):
        with Client(PLAIN) as client:
            events = [(50, 105, 5000.0, "err-0"), (50, 106, 5001.0, "err-1"),
                      (50, 107, float("nan"), "err-2")]
            with self.assertRaises(TlpdError) as caught:
                client.ingest(events, batch_size=2)
            self.assertEqual(caught.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("'ts'", caught.exception.message)
            self.assertEqual(caught.exception.summary.accepted, 2)  # the first batch


class QueryTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with Client(PLAIN) as client:
            client.ingest([(60 + i % 3, 110 + i % 4, 6000.0 + i, f"q-{i}") for i in range(300)])

    def test_score_topk_node_info_health(self):
        with Client(PLAIN) as client:
            self.assertEqual(client.health(), "SERVING")
            scores = client.score([(60, 110), (999999, 110)])
            self.assertEqual(len(scores), 2)
            self.assertTrue(0.0 < scores[0].probability < 1.0)
            self.assertGreater(scores[0].src_metrics.neighbors_used, 0)
            self.assertTrue(scores[1].src_metrics.cold_start)
            top = client.topk(60, k=3)
            self.assertEqual(len(top), 3)
            self.assertGreaterEqual(top[0].probability, top[1].probability)
            only = client.topk(60, k=5, candidates=[110, 111])
            self.assertEqual(sorted(s.dst for s in only), [110, 111])
            baseline = client.topk(60, k=2, ranker=Ranker.RECENCY_POPULARITY)
            self.assertEqual(len(baseline), 2)
            state = client.node(60, recent_neighbors=5)
            self.assertTrue(state.known)
            self.assertGreaterEqual(state.degree, 100)
            self.assertEqual(len(state.recent), 5)
            info = client.info()
            self.assertEqual(info.architecture, "tgn")
            self.assertTrue(info.fingerprint)
            self.assertFalse(info.node_state)

    def test_bad_queries_raise_with_the_field(self):
        with Client(PLAIN) as client:
            with self.assertRaises(TlpdError) as caught:
                client.topk(60, k=0)
            self.assertEqual(caught.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("k", caught.exception.message)
            # This daemon's model predicts links only; labels are still accepted and stored.
            with self.assertRaises(TlpdError) as caught:
                client.score_node_states([60])
            self.assertEqual(caught.exception.code, grpc.StatusCode.FAILED_PRECONDITION)
            self.assertIn("--node-state", caught.exception.message)
            client.ingest([Event(61, 112, 6400.0, "labelled-1", state_label=1)])
            with self.assertRaises(TlpdError) as caught:
                client.ingest([Event(61, 112, 6401.0, "labelled-2", state_label=2)])
            self.assertIn("state_label", caught.exception.message)


class ModelTest(unittest.TestCase):
    def test_load_rollback_and_refresh(self):
        with Client(PLAIN) as client:
            # Enough events of its own for a refresh to train on and hold back.
            client.ingest([(i % 20, 100 + i % 7, 10_000.0 + i, f"model-{i}") for i in range(800)])
            before = client.model_status()
            self.assertEqual(before.phase, "idle")
            swapped = client.load_model(MODEL_B, wait=True)
            self.assertNotEqual(swapped.fingerprint, before.fingerprint)
            self.assertEqual(swapped.previous_fingerprint, before.fingerprint)
            self.assertEqual(client.info().fingerprint, swapped.fingerprint)
            with self.assertRaises(TlpdError) as caught:
                client.load_model(MODEL_B)
            self.assertEqual(caught.exception.code, grpc.StatusCode.ALREADY_EXISTS)
            back = client.rollback(wait=True)
            self.assertEqual(back.fingerprint, before.fingerprint)
            refreshed = client.refresh_model(wait=True)
            self.assertEqual(refreshed.refresh.refreshes, 1)
            self.assertIn(refreshed.refresh.last_outcome, ("promoted", "kept"))
            self.assertEqual(refreshed.refresh.serving_fingerprint, before.fingerprint)
            self.assertGreater(refreshed.refresh.held_back_queries, 0)


class SecurityTest(unittest.TestCase):
    def secure(self, token):
        return Client(SECURE, token=token, root_certificates=CERTS / "ca.pem",
                      certificate_chain=CERTS / "client.pem", private_key=CERTS / "client.key")

    def test_mutual_tls_and_the_right_token_get_in(self):
        with self.secure("s3cret-token") as client:
            self.assertEqual(client.ingest([(1, 2, 1.0, "tls-0")]).accepted, 1)
            self.assertEqual(client.health(), "SERVING")

    def test_a_missing_or_wrong_token_is_refused(self):
        for token in (None, "wrong-token"):
            with self.secure(token) as client:
                with self.assertRaises(TlpdError) as caught:
                    client.score([(1, 2)])
                self.assertEqual(caught.exception.code, grpc.StatusCode.UNAUTHENTICATED)

    def test_admin_calls_need_an_admin_token(self):
        with self.secure("s3cret-token") as client:
            with self.assertRaises(TlpdError) as caught:
                client.model_status()
            self.assertEqual(caught.exception.code, grpc.StatusCode.PERMISSION_DENIED)

    def test_plaintext_cannot_reach_a_tls_daemon(self):
        with Client(SECURE, timeout=2) as client:
            with self.assertRaises(TlpdError) as caught:
                client.info()
            self.assertEqual(caught.exception.code, grpc.StatusCode.UNAVAILABLE)


if __name__ == "__main__":
    unittest.main()
