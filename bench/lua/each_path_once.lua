-- wrk: walks the paths in $PATHS in order, each thread its own slice, each path once
-- (for the cache-miss cell: every id is new to musicd and to Redis).
local paths = {}
for line in io.lines(os.getenv("PATHS")) do paths[#paths + 1] = line end
local threads = 0
setup = function(thread)
  thread:set("slot", threads)
  threads = threads + 1
end
local i = 0
request = function()
  i = i + 1
  local index = (slot * 100000 + i) % #paths + 1
  return wrk.format("GET", paths[index])
end
