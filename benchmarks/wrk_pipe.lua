-- wrk's request for POST /pipe (one 14-word text) and a RESULT line at the end: p50, p99, requests, non-2xx,
-- socket errors (benchmarks/results/serve_wrk_epyc.txt). wrk -t1 -c8 -d15s -s benchmarks/wrk_pipe.lua http://127.0.0.1:8000/pipe
wrk.method = "POST"
wrk.body   = '{"texts": ["The loan officer at our local bank approved the mortgage within a week ."]}'
wrk.headers["Content-Type"] = "application/json"
done = function(summary, latency, requests)
  io.write(string.format("RESULT p50_ms=%.1f p99_ms=%.1f requests=%d non2xx=%d connect=%d read=%d write=%d timeout=%d\n",
    latency:percentile(50)/1000, latency:percentile(99)/1000, summary.requests, summary.errors.status,
    summary.errors.connect, summary.errors.read, summary.errors.write, summary.errors.timeout))
end
