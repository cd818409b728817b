-- Every request a new key: each one is a durable decision (fsync).
-- WRK_KEYS_PER_THREAD=N (optional) bounds the run to N new keys per thread:
-- after N requests the thread repeats its first key (a duplicate, no new
-- actor) and stops once N answers arrived; bench/run.sh then ends wrk.
dofile(os.getenv("WRK_LUA_DIR") .. "/common.lua")
local cap = tonumber(os.getenv("WRK_KEYS_PER_THREAD") or "0")

request = function()
  n = n + 1
  local i = n
  if cap > 0 and n > cap then
    i = 1
  end
  return wrk.format("POST", webhook_path,
                    headers_for("u-" .. run .. "-" .. id .. "-" .. i), body)
end

if cap > 0 then
  stop_after(cap)
end
