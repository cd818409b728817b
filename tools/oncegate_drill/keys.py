"""What oncegate derives from a request, computed the same way in Python:
the derived key of a signal without an id, its partition, the key an upstream sees, the
body's canonical fingerprint, and the signatures senders put on a request
(GitHub, Standard Webhooks). One helper for the drill's senders and the
process tests (tests/process/test_contract.py, test_logging.py).

Lives here: pure functions of their arguments (hashlib, hmac, json).
Must not: send anything, or import another module of the package.
"""

import base64
import hashlib
import hmac
import json


def partition_of(route, key, partitions):
    """The partition of (route, key) among `partitions`
    (common/partition.hpp; docs/cluster.md, Partitions)."""
    r, k = route.encode(), key.encode()
    digest = hashlib.sha256(len(r).to_bytes(4, "little") + r + k).digest()
    return int.from_bytes(digest[:8], "big") % partitions


def derived_key(exchange, symbol, action, ms):
    """The key of a signal without an id: SHA-256 hex of the
    normalised fields. v1 joins them with `|`; a field holding `|` takes
    v2, which prefixes each field with its length in bytes."""
    fields = [exchange, symbol, action, str(ms)]
    if any("|" in f for f in fields):
        material = "v2" + "".join(
            "|%d:%s" % (len(f.encode()), f) for f in fields)
    else:
        material = "v1|" + "|".join(fields)
    return hashlib.sha256(material.encode()).hexdigest()


def body_key(data):
    """The key of a github delivery: the SHA-256 of the signed body."""
    return hashlib.sha256(data).hexdigest()


def forwarded_key(key):
    """The Idempotency-Key an upstream sees for `key`."""
    if (key and all(0x20 <= ord(c) <= 0x7E for c in key)
            and key[0] != " " and key[-1] != " "
            and not key.lower().startswith("sha256:")):
        return key
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def canonical_fingerprint(doc):
    """SHA-256 hex of the canonical form, for simple ASCII bodies."""
    doc = {k: v for k, v in doc.items()
           if k not in ("passphrase", "secret", "token")}
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def github_signature(secret, body):
    """X-Hub-Signature-256 of `body` (bytes) under `secret` (text)."""
    return "sha256=" + hmac.new(secret.encode(), body,
                                hashlib.sha256).hexdigest()


def sw_signature(key, msg_id, timestamp, body):
    """webhook-signature of a Standard Webhooks request: v1, then the
    base64 HMAC-SHA256 over id.timestamp.body under `key` (bytes)."""
    content = ("%s.%s." % (msg_id, timestamp)).encode() + body
    return "v1," + base64.b64encode(
        hmac.new(key, content, hashlib.sha256).digest()).decode()
