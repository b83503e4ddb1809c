-- wrk script: a non-streamed chat completion, the same body for the upstream and the gateway; or the same
-- question as OpenAI's Responses API asks it (BENCH_API=responses, sent to a /v1/responses URL).
--
-- Environment:
--   BENCH_MODEL      model id to send (default "bench-chat")
--   BENCH_API        "chat" (default) or "responses": which API's body to send
--   BENCH_KEYS_FILE  optional file with one API key per line. The requests go round-robin over
--                    the keys (each wrk thread starts at its own offset), because one key may make
--                    at most 1000 requests a minute and 10000 an hour and the benchmark makes more.
--   BENCH_RESULT     file the done() summary is appended to, one JSON object per run
--
-- done() writes requests/s and latency percentiles in microseconds, so the Python driver does
-- not have to parse wrk's human-readable table.

local model = os.getenv("BENCH_MODEL") or "bench-chat"
local body = '{"model":"' .. model .. '","messages":[{"role":"system","content":"You are terse."},' ..
             '{"role":"user","content":"Say hello to the benchmark."}]}'
if os.getenv("BENCH_API") == "responses" then
    body = '{"model":"' .. model .. '","instructions":"You are terse.","input":"Say hello to the benchmark."}'
end

local keys = {}
local keys_file = os.getenv("BENCH_KEYS_FILE")
if keys_file and keys_file ~= "" then
    for line in io.lines(keys_file) do
        if line ~= "" then keys[#keys + 1] = line end
    end
end

local thread_count = 0
function setup(thread)
    thread:set("offset", thread_count * 7919)
    thread_count = thread_count + 1
end

local counter = 0
local prepared = {}

function init(args)
    counter = tonumber(offset) or 0
    -- Pre-format one request per key, so request() only picks one.
    if #keys == 0 then
        prepared[1] = wrk.format("POST", nil, {["Content-Type"] = "application/json"}, body)
    end
    for i, key in ipairs(keys) do
        prepared[i] = wrk.format("POST", nil, {
            ["Content-Type"] = "application/json",
            ["Authorization"] = "Bearer " .. key,
        }, body)
    end
end

-- Defined at the top level: wrk only calls request() for scripts that define it here.
function request()
    counter = counter + 1
    return prepared[(counter % #prepared) + 1]
end

function done(summary, latency, requests)
    local out = os.getenv("BENCH_RESULT")
    local line = string.format(
        '{"requests": %d, "duration_us": %d, "rps": %.1f, "p50_us": %d, "p90_us": %d, "p99_us": %d, ' ..
        '"max_us": %d, "mean_us": %.1f, "non_2xx": %d, "socket_errors": %d, "timeouts": %d}\n',
        summary.requests, summary.duration, summary.requests / (summary.duration / 1e6),
        latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max, latency.mean,
        summary.errors.status, summary.errors.connect + summary.errors.read + summary.errors.write,
        summary.errors.timeout)
    if out and out ~= "" then
        local f = io.open(out, "a")
        f:write(line)
        f:close()
    else
        io.write(line)
    end
end
