-- One hot key: every request meets the same key actor.
dofile(os.getenv("WRK_LUA_DIR") .. "/common.lua")

request = function()
  return wrk.format("POST", "/v1/webhook", headers_for("d-0"), body)
end
