"""Webhook traffic against the nodes: open-loop signals at a rate, each
delivered (and retried) the way its sender would, duplicates sent to
several nodes at once (Traffic), and after recovery the resend pass that
sends every decided key once more (`resend`).

Lives here: threads, the retry heap, node targeting and the record of
every attempt. Must not: build requests (senders.py), inject faults
(faults.py) or judge (verdict.py reads `signals` and `attempts`).
"""

import heapq
import queue
import random
import threading
import time

from .base import DrillError, TRANSPORT_ERRORS, http_call, \
    transport_error_name
from .senders import classify, decided

RESEND_TIMEOUT = 60.0  # the whole resend pass after recovery


class Signal:
    """One webhook signal: its key and body, and what its deliveries got."""

    def __init__(self, index, sender, key, body, created):
        self.index = index
        self.sender = sender
        self.key = key
        self.body = body
        self.created = created
        self.decided_at = None  # first successful decision (2xx or 409)
        self.acked = None  # executed | duplicate | replayed | accepted
        self.first_answers = 0  # 2xx answers that were not replays
        self.in_doubt = False
        self.finals = []  # last result of each delivery
        self.abandoned = 0  # deliveries still retrying when the drill ended


class Delivery:
    """One copy of a signal as its sender sends it, retries included."""

    def __init__(self, sig, node=None):
        self.sig = sig
        self.node = node  # the first attempt's node, for duplicate bursts
        self.attempt = 0


class Traffic:
    """Open-loop webhook traffic: new signals at `rate`, each with its
    sender's retries, sent to the nodes round robin or at random. A
    dispatcher thread releases due attempts to `concurrency` workers; a
    retry waits in a heap, never in a thread. Bounded: `keys` signals at
    most, the sender's retries per delivery, and a drain deadline."""

    def __init__(self, cluster, sc, senders, rng):
        self.cluster = cluster
        self.sc = sc
        self.rng = rng
        self.senders = senders  # [(sender, weight)]
        self.lock = threading.Condition()
        self.heap = []
        self.seq = 0
        self.work = queue.Queue()
        self.in_flight = 0
        self.signals = []
        self.attempts = []  # (t_start, t_end, node, result, signal index)
        self.key_mismatches = []
        self.new_until = float("inf")
        self.drain_deadline = float("inf")
        self.round_robin = 0
        self.backlog = 0.0  # longest wait of a due attempt for a worker
        self.done = threading.Event()
        self.t0 = None
        self.threads = []

    def start(self):
        self.t0 = time.monotonic()
        # The drill host's clock at drill time 0: the real time the
        # records' stamps are judged against (never stepped by the drill).
        self.wall0 = time.time()
        self.threads = [threading.Thread(target=self._dispatch, daemon=True)]
        self.threads += [threading.Thread(target=self._work, daemon=True)
                         for _ in range(self.sc.concurrency)]
        for t in self.threads:
            t.start()
        return self

    def now(self):
        return time.monotonic() - self.t0

    def finish(self, new_until, drain):
        """No new signals after `new_until` (drill time); retries run until
        `drain` later. Waits for both, bounded."""
        with self.lock:
            self.new_until = new_until
            self.drain_deadline = new_until + drain
            self.lock.notify_all()
        longest = max(s.timeout for s, _ in self.senders)
        self.done.wait(max(0.0, self.drain_deadline - self.now()) + longest
                       + 5.0)
        for _ in range(self.sc.concurrency):
            self.work.put(None)
        for t in self.threads:
            t.join(longest + 5.0)
        if any(t.is_alive() for t in self.threads):
            raise DrillError("traffic threads did not stop")

    def _new_signal(self, created):
        index = len(self.signals)
        total = sum(w for _, w in self.senders)
        pick = self.rng.uniform(0, total)
        for sender, weight in self.senders:
            pick -= weight
            if pick <= 0:
                break
        key, body = sender.make(index)
        sig = Signal(index, sender, key, body, created)
        self.signals.append(sig)
        copies = [Delivery(sig)]
        if self.rng.random() < self.sc.duplicates:
            ids = self.cluster.ids()
            first = self.rng.randrange(len(ids))
            copies = [Delivery(sig, ids[(first + j) % len(ids)])
                      for j in range(min(self.sc.fanout, len(ids)))]
        for d in copies:
            self._push(created, d)

    def _push(self, due, delivery):
        self.seq += 1
        heapq.heappush(self.heap, (due, self.seq, delivery))

    def _dispatch(self):
        interval = 1.0 / self.sc.rate
        next_new = 0.0
        with self.lock:
            while True:
                now = self.now()
                while (next_new <= now and next_new < self.new_until
                       and len(self.signals) < self.sc.keys):
                    self._new_signal(next_new)
                    next_new += interval
                generating = (next_new < self.new_until
                              and len(self.signals) < self.sc.keys)
                if now >= self.new_until:
                    self._prune(now)
                while self.heap and self.heap[0][0] <= now:
                    due, _, d = heapq.heappop(self.heap)
                    self.in_flight += 1
                    self.work.put((due, d))
                if not generating and not self.heap and self.in_flight == 0:
                    self.done.set()
                    return
                wake = min(self.heap[0][0] if self.heap else float("inf"),
                           next_new if generating else float("inf"))
                self.lock.wait(max(0.001, min(wake - now, 0.5)))

    def _prune(self, now):
        """Once new signals stopped: retries of signals that already got a
        decision are dropped (the resend pass checks those keys again),
        and at the drain deadline every retry is (abandoned)."""
        keep = []
        for entry in self.heap:
            sig = entry[2].sig
            if sig.decided_at is not None or now >= self.drain_deadline \
                    or entry[0] >= self.drain_deadline:
                sig.abandoned += 1
            else:
                keep.append(entry)
        if len(keep) != len(self.heap):
            heapq.heapify(keep)
            self.heap = keep

    def _pick_node(self, d):
        if d.attempt == 0 and d.node is not None:
            return d.node
        ids = self.cluster.ids()
        if self.sc.targeting == "random":
            return self.rng.choice(ids)
        with self.lock:
            self.round_robin += 1
            return ids[self.round_robin % len(ids)]

    def _work(self):
        while True:
            item = self.work.get()
            if item is None:
                return
            due, d = item
            try:
                if self.now() >= self.drain_deadline:
                    with self.lock:
                        d.sig.abandoned += 1
                else:
                    self._attempt(d, due)
            finally:
                with self.lock:
                    self.in_flight -= 1
                    self.lock.notify_all()

    def _attempt(self, d, due):
        sig, sender = d.sig, d.sig.sender
        node = self.cluster.nodes[self._pick_node(d)]
        path, headers, body = sender.request(sig)
        t_start = self.now()
        try:
            status, hdrs, data = http_call(node.host, node.port, "POST", path,
                                           body, headers, sender.timeout)
            result, outcome = status, classify(status, hdrs, data)
        except TRANSPORT_ERRORS as e:
            hdrs, result, outcome = {}, transport_error_name(e), "transport"
        t_end = self.now()
        with self.lock:
            # Waiting for a free worker distorts the senders' timing; the
            # report shows how much (raise [traffic] concurrency if large).
            self.backlog = max(self.backlog, t_start - due)
            self.attempts.append((t_start, t_end, node.id, result, outcome,
                                  sig.index))
            echoed = hdrs.get("idempotency-key")
            if echoed is not None and echoed != sig.key:
                self.key_mismatches.append((sig.key, echoed))
            self._note(sig, result, outcome, t_end)
            delay = sender.retry_delay(d.attempt, result, self.rng)
            if delay is None:
                sig.finals.append(outcome if outcome != "transport"
                                  else result)
            elif t_end + delay >= self.drain_deadline:
                sig.abandoned += 1
            else:
                d.attempt += 1
                self._push(t_end + delay, d)

    @staticmethod
    def _note(sig, result, outcome, t_end):
        if decided(result) and sig.decided_at is None:
            sig.decided_at = t_end
        if outcome == "executed":
            sig.first_answers += 1
            sig.acked = "executed"
        elif outcome in ("replayed", "duplicate", "in-progress") \
                and sig.acked is None:
            # in-progress: 202, the node took the signal over (async
            # delivery) and owes it one execution.
            sig.acked = "accepted" if outcome == "in-progress" else outcome
        elif outcome == "in-doubt":
            sig.in_doubt = True


def resend(cluster, signals, seed):
    """Sends every decided key once more, as its sender would: each must
    be answered as a duplicate (409, or a replay), never executed
    again. Returns {key: outcome}."""
    results = {}
    lock = threading.Lock()
    todo = queue.Queue()
    for sig in signals:
        todo.put(sig)
    ids = cluster.ids()
    deadline = time.monotonic() + RESEND_TIMEOUT

    def worker():
        rng = random.Random(seed)
        while time.monotonic() < deadline:
            try:
                sig = todo.get_nowait()
            except queue.Empty:
                return
            outcome = "unavailable"
            for attempt in range(8):
                node = cluster.nodes[rng.choice(ids)]
                path, headers, body = sig.sender.request(sig)
                try:
                    status, hdrs, data = http_call(
                        node.host, node.port, "POST", path, body,
                        headers, 10.0)
                    outcome = classify(status, hdrs, data)
                except TRANSPORT_ERRORS as e:
                    outcome = transport_error_name(e)
                if outcome not in ("unavailable", "timeout", "refused",
                                   "reset", "error", "unreachable"):
                    break
                time.sleep(0.1 * (attempt + 1))  # the sender's backoff
            with lock:
                results[sig.key] = outcome

    threads = [threading.Thread(target=worker, daemon=True)
               for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()) + 15.0)
    return results
