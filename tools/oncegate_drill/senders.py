"""The drill's webhook senders, as TradingView and Standard Webhooks send
(bodies, keys, signatures, retry schedules), and what an answer means for
the drill's bookkeeping (`classify`, `decided`).

Lives here: one request of one signal and the sender's next retry delay.
Must not: pick nodes, keep time or count anything (traffic.py does), or
derive keys itself (keys.py is the one Python copy of the derivation).
"""

import base64
import json
import time

from .base import UsageError, parse_duration, parse_span
from .keys import derived_key, sw_signature

PROBLEM_PREFIX = "https://oncegate.dev/problems/"


def retryable_status(result):
    """5xx answers and transport errors (timeouts, refused, reset)."""
    return not isinstance(result, int) or result >= 500


class TradingViewSender:
    """TradingView alerts: a text/plain JSON body with the route's token as
    `passphrase`, keyed by the derived key (exchange, symbol, action,
    timestamp); resent on 5xx and timeouts a few times, seconds apart."""

    name = "tradingview"

    def __init__(self, sc, run_id):
        self.route = sc.get("traffic", "tradingview-route")
        self.token = sc.get("traffic", "tradingview-token")
        self.timeout = sc.duration("traffic", "tradingview-timeout")
        self.retries = sc.int("traffic", "tradingview-retries", 0, 100)
        self.interval = parse_span(sc.get("traffic", "tradingview-interval"))
        # Unique per run: a real cluster keeps keys for a day.
        self.exchange = "DRILL" + run_id.upper()
        self.base_ms = int(time.time() * 1000)

    def make(self, index):
        """(key, body) of signal `index`."""
        ts = self.base_ms + index
        symbol = "S%02dUSDT" % (index % 20)
        action = ("buy", "sell")[index % 2]
        body = json.dumps({"exchange": self.exchange, "symbol": symbol,
                           "action": action, "timestamp": ts,
                           "qty": index % 7 + 1, "passphrase": self.token})
        return derived_key(self.exchange, symbol, action, ts), body.encode()

    def request(self, sig):
        return ("/v1/webhook/" + self.route,
                {"Content-Type": "text/plain; charset=utf-8"}, sig.body)

    def retry_delay(self, attempt, result, rng):
        """Seconds until the next attempt after attempt `attempt` (0 = the
        first) got `result`; None when the sender is done."""
        if retryable_status(result) and attempt < self.retries:
            return rng.uniform(*self.interval)
        return None


class StandardWebhooksSender:
    """Standard Webhooks (Svix and others): `webhook-id` is the key, each
    attempt signed anew (HMAC-SHA256 over id.timestamp.body); anything but
    2xx is retried on the exponential schedule, compressed for the drill."""

    name = "standard-webhooks"

    def __init__(self, sc, run_id):
        self.route = sc.get("traffic", "standard-webhooks-route")
        secret = sc.get("traffic", "standard-webhooks-secret")
        try:
            self.key = base64.b64decode(secret[len("whsec_"):]
                                        if secret.startswith("whsec_")
                                        else secret, validate=True)
        except ValueError:
            raise UsageError("[traffic] standard-webhooks-secret: not "
                             "whsec_<base64>")
        self.timeout = sc.duration("traffic", "standard-webhooks-timeout")
        compress = sc.float("traffic", "standard-webhooks-compress", 1, 1e6)
        self.schedule = [parse_duration(s) / compress for s in
                         sc.get("traffic", "standard-webhooks-schedule")
                         .split(",") if s.strip()]
        self.run_id = run_id

    def make(self, index):
        key = "msg_drill_%s_%d" % (self.run_id, index)
        body = json.dumps({"type": "signal.created", "data": {
            "symbol": "S%02dUSDT" % (index % 20),
            "action": ("buy", "sell")[index % 2], "qty": index % 7 + 1}})
        return key, body.encode()

    def request(self, sig):
        ts = str(int(time.time()))
        return ("/v1/webhook/" + self.route,
                {"Content-Type": "application/json", "webhook-id": sig.key,
                 "webhook-timestamp": ts,
                 "webhook-signature": sw_signature(self.key, sig.key, ts,
                                                   sig.body)},
                sig.body)

    def retry_delay(self, attempt, result, rng):
        if isinstance(result, int) and 200 <= result < 300:
            return None
        if attempt < len(self.schedule):
            return self.schedule[attempt]
        return None


def decided(result):
    """A successful decision: 2xx, or 409 (a duplicate, in flight or in
    doubt: the gateway knows the key)."""
    return isinstance(result, int) and (200 <= result < 300 or result == 409)


def classify(status, headers, body):
    """What an answer means for the drill's bookkeeping."""
    if 200 <= status < 300:
        if headers.get("idempotent-replayed") == "true":
            return "replayed"
        return "in-progress" if status == 202 else "executed"
    problem = ""
    try:
        doc = json.loads(body or b"{}")
        if isinstance(doc, dict):
            problem = str(doc.get("type", "")).replace(PROBLEM_PREFIX, "")
    except ValueError:
        pass
    if status == 409 and problem in ("duplicate", "in-flight", "in-doubt"):
        return problem
    if status in (502, 504) and problem == "in-doubt":
        return "in-doubt"
    if status == 503:
        return "unavailable"
    return "unexpected"
