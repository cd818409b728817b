-- 100% duplicates over a pool of keys claimed beforehand (bench/run.sh
-- preloads keys d-0 .. d-(POOL-1) and warms them): every answer is a 409.
-- WRK_PREFIX (default d-) selects the pool's key prefix. WRK_ONCE=1 sends
-- each key of the pool at most once per thread (the thread stops after POOL
-- answers; use with -t1 for a pool of distinct cold keys). The first POOL
-- requests of a thread are distinct keys as long as POOL is not a multiple
-- of 7919.
dofile(os.getenv("WRK_LUA_DIR") .. "/common.lua")
local pool = tonumber(os.getenv("WRK_POOL") or "10000")
local prefix = os.getenv("WRK_PREFIX") or "d-"

request = function()
  n = n + 1
  return wrk.format("POST", "/v1/webhook",
                    headers_for(prefix .. ((n * 7919 + id * 104729) % pool)),
                    body)
end

if os.getenv("WRK_ONCE") == "1" then
  stop_after(pool)
end
