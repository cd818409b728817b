-- 100% duplicates over a pool of keys claimed beforehand (bench/run.sh
-- primes keys d-0 .. d-(POOL-1)): every answer is a 409 from a key actor.
dofile(os.getenv("WRK_LUA_DIR") .. "/common.lua")
local pool = tonumber(os.getenv("WRK_POOL") or "10000")

request = function()
  n = n + 1
  return wrk.format("POST", "/v1/webhook",
                    headers_for("d-" .. ((n * 7919 + id * 104729) % pool)),
                    body)
end
