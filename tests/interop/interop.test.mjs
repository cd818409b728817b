// oncegate against the senders' own signing libraries: `standardwebhooks`
// (the Standard Webhooks reference library) and `@octokit/webhooks-methods`
// (GitHub's signer). Runs the real binary (ONCEGATE_BIN) on 127.0.0.1, port 0.
//
//   ONCEGATE_BIN=/path/to/oncegate node --test interop.test.mjs

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createHash, randomBytes, randomUUID } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";

import { Webhook } from "standardwebhooks";
import { sign } from "@octokit/webhooks-methods";

const START_TIMEOUT_MS = 20_000;
const STOP_TIMEOUT_MS = 10_000;
const REQUEST_TIMEOUT_MS = 10_000;
const PROBLEM = "https://oncegate.dev/problems/";

const SW_SECRET = "whsec_" + randomBytes(32).toString("base64");
const SW_OTHER_SECRET = "whsec_" + randomBytes(32).toString("base64");
const GH_SECRET = "gh-" + randomBytes(16).toString("hex");

let dir;
let child;
let baseUrl;
let stderr = "";

function killChild() {
  if (child && child.exitCode === null && child.signalCode === null)
    child.kill("SIGKILL");
}

// A failing or interrupted run must not leave the node behind.
process.on("exit", killChild);

// Resolves with the port from `oncegate ready http=127.0.0.1:PORT`, bounded.
function readyPort(proc) {
  return new Promise((resolvePort, reject) => {
    const lines = createInterface({ input: proc.stdout });
    const timer = setTimeout(() => {
      reject(new Error(`oncegate not ready within ${START_TIMEOUT_MS} ms; `
                       + `stderr:\n${stderr}`));
    }, START_TIMEOUT_MS);
    lines.on("line", (line) => {
      const m = /^oncegate ready http=127\.0\.0\.1:(\d+)$/.exec(line.trim());
      if (m) {
        clearTimeout(timer);
        resolvePort(Number(m[1]));
      }
    });
    proc.on("error", (err) => {
      clearTimeout(timer);
      reject(err);
    });
    proc.on("exit", (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`oncegate exited (${code ?? signal}) before ready; `
                       + `stderr:\n${stderr}`));
    });
  });
}

before(async () => {
  const bin = process.env.ONCEGATE_BIN;
  assert.ok(bin, "set ONCEGATE_BIN to the oncegate binary");
  dir = await mkdtemp(join(tmpdir(), "oncegate-interop-"));
  const config = join(dir, "oncegate.ini");
  await writeFile(config, [
    "[route.sw]",
    'auth="standard-webhooks"',
    `secret="${SW_SECRET}"`,
    "ttl=72h",
    "",
    "[route.gh]",
    'auth="github"',
    `secret="${GH_SECRET}"`,
    "",
  ].join("\n"));
  child = spawn(resolve(bin), [
    "--http-port=0",
    "--data-dir=" + join(dir, "data"),
    "--log-level=warn",
    "--config-file=" + config,
  ], { stdio: ["ignore", "pipe", "pipe"] });
  child.stderr.setEncoding("utf8");
  child.stderr.on("data", (text) => {
    stderr = (stderr + text).slice(-8000);
  });
  const port = await readyPort(child);
  baseUrl = `http://127.0.0.1:${port}`;
});

after(async () => {
  try {
    if (child && child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((done) => child.once("exit", done));
      child.kill("SIGTERM");
      const timer = setTimeout(killChild, STOP_TIMEOUT_MS);
      await exited;
      clearTimeout(timer);
    }
  } finally {
    if (dir)
      await rm(dir, { recursive: true, force: true });
  }
});

// Posts `body` (a string, sent as-is) and parses the JSON answer.
async function post(path, body, headers) {
  const res = await fetch(baseUrl + path, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body,
    signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
  });
  const text = await res.text();
  let json;
  try {
    json = JSON.parse(text);
  } catch {
    assert.fail(`response ${res.status} is not JSON: ${text}`);
  }
  return { status: res.status, headers: res.headers, json, text };
}

function assertAccepted(res, key, source = "webhook-id") {
  assert.equal(res.status, 200, res.text);
  assert.equal(res.json.status, "accepted", res.text);
  assert.equal(res.json.idempotency_key, key, res.text);
  assert.equal(res.json.key_source, source, res.text);
  assert.equal(res.headers.get("idempotency-key"), key);
  assert.equal(res.headers.get("cache-control"), "no-store");
}

function assertProblem(res, status, name) {
  assert.equal(res.status, status, res.text);
  assert.equal(res.headers.get("content-type"), "application/problem+json");
  assert.equal(res.json.type, PROBLEM + name, res.text);
  assert.equal(res.json.status, status, res.text);
}

// Posts the same delivery twice with `postTo`: `assertFirst` checks the
// first answer, the second must be a 409 duplicate of it. Returns the second.
async function assertRedeliveryIsDuplicate(postTo, payload, headers,
                                           assertFirst) {
  const first = await postTo(payload, headers);
  assertFirst(first);
  const again = await postTo(payload, headers);
  assertProblem(again, 409, "duplicate");
  assert.equal(again.headers.get("idempotent-replayed"), "true");
  assert.equal(again.json.first_seen, first.json.received_at);
  return again;
}

// -- Standard Webhooks --------------------------------------------------------

function swPayload() {
  // Non-ASCII on purpose: the library signs the UTF-8 of the string, fetch
  // sends the same bytes, and oncegate must verify over exactly those.
  return JSON.stringify({
    type: "invoice.paid",
    timestamp: new Date().toISOString(),
    data: { id: randomUUID(), amount: "12,50 \u20ac", note: "caf\u00e9" },
  });
}

function swHeaders(secret, msgId, date, payload) {
  return {
    "webhook-id": msgId,
    "webhook-timestamp": String(Math.floor(date.getTime() / 1000)),
    "webhook-signature": new Webhook(secret).sign(msgId, date, payload),
  };
}

function postSw(payload, headers) {
  return post("/v1/webhook/sw", payload, headers);
}

describe("standardwebhooks", () => {
  test("a signed delivery is accepted with the webhook-id as its key",
       async () => {
    const msgId = "msg_" + randomUUID();
    const payload = swPayload();
    const res = await postSw(payload,
                             swHeaders(SW_SECRET, msgId, new Date(), payload));
    assertAccepted(res, msgId);
  });

  test("the same signed delivery again is a 409 duplicate", async () => {
    const msgId = "msg_" + randomUUID();
    const payload = swPayload();
    const headers = swHeaders(SW_SECRET, msgId, new Date(), payload);
    const again = await assertRedeliveryIsDuplicate(
        postSw, payload, headers, (first) => assertAccepted(first, msgId));
    assert.equal(again.json.original_status, 200);
  });

  test("a retry re-signed with a later timestamp is still a duplicate",
       async () => {
    const msgId = "msg_" + randomUUID();
    const payload = swPayload();
    const now = Date.now();
    const first = await postSw(payload, swHeaders(SW_SECRET, msgId,
                                                  new Date(now - 60_000),
                                                  payload));
    assertAccepted(first, msgId);
    const retry = await postSw(payload, swHeaders(SW_SECRET, msgId,
                                                  new Date(now), payload));
    assertProblem(retry, 409, "duplicate");
  });

  test("a tampered body is 401", async () => {
    const msgId = "msg_" + randomUUID();
    const payload = swPayload();
    const headers = swHeaders(SW_SECRET, msgId, new Date(), payload);
    const tampered = payload.replace("12,50", "99,50");
    assert.notEqual(tampered, payload);
    assertProblem(await postSw(tampered, headers), 401, "unauthorized");
  });

  test("a signature made with another secret is 401 and stores nothing",
       async () => {
    const msgId = "msg_" + randomUUID();
    const payload = swPayload();
    const forged = await postSw(payload, swHeaders(SW_OTHER_SECRET, msgId,
                                                   new Date(), payload));
    assertProblem(forged, 401, "unauthorized");
    // Not stored: the genuine delivery with the same id still executes.
    const genuine = await postSw(payload, swHeaders(SW_SECRET, msgId,
                                                    new Date(), payload));
    assertAccepted(genuine, msgId);
  });

  for (const [when, direction] of [["ago", -1], ["ahead", 1]]) {
    test(`a delivery signed ten minutes ${when} is 401`, async () => {
      const msgId = "msg_" + randomUUID();
      const payload = swPayload();
      const signedAt = new Date(Date.now() + direction * 10 * 60 * 1000);
      const res = await postSw(payload,
                               swHeaders(SW_SECRET, msgId, signedAt, payload));
      assertProblem(res, 401, "unauthorized");
    });
  }

  test("what oncegate accepts, the library itself verifies", async () => {
    // Guards the test's own setup: the headers sent are ones the reference
    // verifier accepts for this secret.
    const msgId = "msg_" + randomUUID();
    const payload = swPayload();
    const headers = swHeaders(SW_SECRET, msgId, new Date(), payload);
    assert.deepEqual(new Webhook(SW_SECRET).verify(payload, headers),
                     JSON.parse(payload));
    assertAccepted(await postSw(payload, headers), msgId);
  });
});

// -- GitHub -------------------------------------------------------------------

function ghPayload() {
  return JSON.stringify({
    action: "opened",
    number: Math.floor(Math.random() * 1e6),
    pull_request: { title: "Fix na\u00efve parsing", id: randomUUID() },
  });
}

async function ghHeaders(secret, delivery, payload) {
  return {
    "x-github-event": "pull_request",
    "x-github-delivery": delivery,
    "x-hub-signature-256": await sign(secret, payload),
  };
}

function postGh(payload, headers) {
  return post("/v1/webhook/gh", payload, headers);
}

// GitHub's HMAC covers the body only, so the key is what it covers: the
// body's SHA-256 (X-GitHub-Delivery is not signed).
function ghKey(payload) {
  return createHash("sha256").update(payload).digest("hex");
}

function assertGhAccepted(res, payload) {
  assertAccepted(res, ghKey(payload), "github-body");
}

describe("@octokit/webhooks-methods", () => {
  test("a signed delivery is accepted with its body hash as its key",
       async () => {
    const delivery = randomUUID();
    const payload = ghPayload();
    const res = await postGh(payload,
                             await ghHeaders(GH_SECRET, delivery, payload));
    assertGhAccepted(res, payload);
  });

  test("the same signed body under another delivery id is a 409 duplicate",
       async () => {
    const payload = ghPayload();
    const first = await postGh(payload,
                               await ghHeaders(GH_SECRET, randomUUID(),
                                               payload));
    assertGhAccepted(first, payload);
    const replayed = await postGh(payload,
                                  await ghHeaders(GH_SECRET, randomUUID(),
                                                  payload));
    assertProblem(replayed, 409, "duplicate");
  });

  test("a redelivery is a 409 duplicate", async () => {
    const delivery = randomUUID();
    const payload = ghPayload();
    const headers = await ghHeaders(GH_SECRET, delivery, payload);
    await assertRedeliveryIsDuplicate(
        postGh, payload, headers, (first) => assertGhAccepted(first, payload));
  });

  test("a tampered body is 401", async () => {
    const delivery = randomUUID();
    const payload = ghPayload();
    const headers = await ghHeaders(GH_SECRET, delivery, payload);
    const tampered = payload.replace('"opened"', '"closed"');
    assert.notEqual(tampered, payload);
    assertProblem(await postGh(tampered, headers), 401, "unauthorized");
  });

  test("a signature made with another secret is 401 and stores nothing",
       async () => {
    const delivery = randomUUID();
    const payload = ghPayload();
    const forged = await postGh(payload, await ghHeaders("not-" + GH_SECRET,
                                                         delivery, payload));
    assertProblem(forged, 401, "unauthorized");
    const genuine = await postGh(payload,
                                 await ghHeaders(GH_SECRET, delivery, payload));
    assertGhAccepted(genuine, payload);
  });
});
