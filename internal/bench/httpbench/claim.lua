-- make bench-http's wrk script: every request claims a task nobody claimed
-- before, so every answered request is a new grant with a history row.
-- Task names are PREFIX-THREAD-N: PREFIX (the script's argument) is unique
-- per run, THREAD numbers wrk's threads, N counts each thread's requests.
-- done() prints one line for cmd httpbench to parse (parseWrk).

local prefix = "bench"
local threads = 0
local counter = 0
local headers = { ["Content-Type"] = "application/json" }
local body

function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end

function init(args)
  if args[1] then prefix = args[1] end
  body = '{"owner":"wrk-' .. tid .. '","ttl_ms":60000}'
end

function request()
  counter = counter + 1
  return wrk.format("POST", "/v1/leases/" .. prefix .. "-" .. tid .. "-" .. counter .. "/claim", headers, body)
end

-- summary.errors.status counts answers with a status above 399.
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "wrk-result requests=%d duration_us=%d status=%d connect=%d read=%d write=%d timeout=%d p50_us=%d p99_us=%d\n",
    summary.requests, summary.duration, e.status, e.connect, e.read, e.write, e.timeout,
    latency:percentile(50), latency:percentile(99)))
end
