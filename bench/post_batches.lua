-- wrk script for the collector ingest benchmark: POST /data with a schema-1 batch of RECORDS records,
-- each request a new batch (unique batch_id, next sequence of this thread's stream), so every request
-- is stored rather than answered as a duplicate.
local RECORDS = tonumber(os.getenv("BENCH_RECORDS") or "100")
local threads = {}
local thread_count = 0

function setup(thread)
   thread_count = thread_count + 1
   thread:set("tid", thread_count)
   table.insert(threads, thread)
end

function init(args)
   run = string.format("wrk-%d-%d", tid, os.time())
   start = os.time()
   seq = 0
   -- a record of sysnest's as the app sends it; its time is filled in per batch
   rec = '{"metric":"sysnest","ts":%.3f,"kind":"row","interval":1,"level":"detail","pid":%d,' ..
         '"comm":"stress","syscall":"read","nr":0,"count":120,"errors":0,"total_us":35.25,' ..
         '"avg_us":0.294,"max_us":4.1}'
   wrk.method = "POST"
   wrk.headers["Content-Type"] = "application/json"
end

function request()
   -- Like a real client, each batch carries the next second of its stream: record times rise within a
   -- stream (a batch of identical times over and over, as this script once sent, is no client's load
   -- and the worst case for the (stream, ts) index).
   local t = start + seq
   local parts = {}
   for i = 1, RECORDS do
      parts[i] = string.format(rec, t + i / (RECORDS + 1), 1000 + i)
   end
   local body = string.format('{"schema":1,"timestamp":%d.0,"source_script":"sysnest","batch_id":"%s-%d",' ..
                              '"sequence":%d,"host":"wrk-host-%d","run_id":"%s","metrics":[%s]}',
                              t + 1, run, seq, seq, tid, run, table.concat(parts, ","))
   seq = seq + 1
   return wrk.format(nil, nil, nil, body)
end
