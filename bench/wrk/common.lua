-- Shared by the oncegate wrk scenarios: unique key prefixes per run and
-- thread, status counting, and a machine-readable summary line.
--
-- The RESULT line: errors= is wrk's total (connect + read + write + timeout
-- + non-2xx; every 409 counts), socket_errors= the same without non-2xx,
-- statuses= the answers by status code.
local threads = {}
local next_id = 0

function setup(thread)
  thread:set("id", next_id)
  next_id = next_id + 1
  table.insert(threads, thread)
end

function init(args)
  run = args[1] or tostring(os.time())
  n = 0
  statuses = {}
end

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end

-- WRK_BODY overrides the body: `{}` matches the fingerprint of the records
-- bench/preload writes, so preloaded keys answer 409 (not 422).
body = os.getenv("WRK_BODY")
  or '{"exchange":"BINANCE","symbol":"BTCUSDT","action":"buy","qty":1}'
-- WRK_PATH: the route's path (default the route `default`); used by
-- unique.lua (bench/run.sh's upstream group posts to /v1/webhook/NAME).
webhook_path = os.getenv("WRK_PATH") or "/v1/webhook"
headers_for = function(key)
  return { ["Content-Type"] = "application/json", ["Idempotency-Key"] = key }
end

-- Bounded runs: this thread stops after `limit` responses. wrk's main
-- thread still waits for -d to end or for SIGINT (bench/run.sh sends it).
function stop_after(limit)
  local base = response
  local got = 0
  response = function(status, headers, body)
    base(status, headers, body)
    got = got + 1
    if got == limit then
      wrk.thread:stop()
    end
  end
end

function done(summary, latency, requests)
  local counts = {}
  for _, t in ipairs(threads) do
    local s = t:get("statuses")
    for code, c in pairs(s) do
      counts[code] = (counts[code] or 0) + c
    end
  end
  local parts = {}
  for code, c in pairs(counts) do
    table.insert(parts, code .. ":" .. c)
  end
  table.sort(parts)
  io.write(string.format(
    "RESULT requests=%d seconds=%.3f rps=%.1f p50_us=%d p90_us=%d p99_us=%d max_us=%d errors=%d socket_errors=%d statuses=%s\n",
    summary.requests, summary.duration / 1e6,
    summary.requests / (summary.duration / 1e6),
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency.max,
    summary.errors.connect + summary.errors.read + summary.errors.write
      + summary.errors.status + summary.errors.timeout,
    summary.errors.connect + summary.errors.read + summary.errors.write
      + summary.errors.timeout,
    table.concat(parts, ",")))
end
