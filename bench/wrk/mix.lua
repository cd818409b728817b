-- 90% duplicates of primed keys, 10% new keys.
dofile(os.getenv("WRK_LUA_DIR") .. "/common.lua")
local pool = tonumber(os.getenv("WRK_POOL") or "10000")

request = function()
  n = n + 1
  local key
  if n % 10 == 0 then
    key = "m-" .. run .. "-" .. id .. "-" .. n
  else
    key = "d-" .. ((n * 7919 + id * 104729) % pool)
  end
  return wrk.format("POST", "/v1/webhook", headers_for(key), body)
end
