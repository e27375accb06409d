// The upstream of bench/streamed.sh: streamed answers, chunked (no Content-Length).
//   node bench/stream_upstream.js PORT
//   POST /big?bytes=N           N bytes (the same pseudo-random bytes every time), in
//                               64 KiB writes of one reused buffer, waiting for 'drain'
//   POST /events?n=N&gap_ms=G   N server-sent events G ms apart, each written alone:
//                               "data: T\n\n", T the CLOCK_MONOTONIC nanoseconds just
//                               before the write (process.hrtime.bigint())
// The request body is read and ignored.
"use strict";
const http = require("http");

const WRITE = 64 * 1024;
const block = Buffer.alloc(WRITE);
let seed = 0x2545f491;
for (let i = 0; i < WRITE; i += 4) {  // xorshift32: incompressible, reproducible
  seed ^= seed << 13; seed ^= seed >>> 17; seed ^= seed << 5;
  block.writeInt32LE(seed | 0, i);
}

function big(res, total) {
  res.writeHead(200, { "Content-Type": "application/octet-stream" });
  let left = total;
  const pump = () => {
    while (left > 0) {
      const n = Math.min(left, WRITE);
      left -= n;
      if (!res.write(n === WRITE ? block : block.subarray(0, n))) {
        res.once("drain", pump);
        return;
      }
    }
    res.end();
  };
  pump();
}

function events(res, n, gapMs) {
  res.writeHead(200, { "Content-Type": "text/event-stream", "Cache-Control": "no-cache" });
  res.flushHeaders();
  let sent = 0;
  const next = () => {
    res.write(`data: ${process.hrtime.bigint()}\n\n`);
    if (++sent === n) res.end();
    else setTimeout(next, gapMs);
  };
  setTimeout(next, gapMs);
}

http.createServer((req, res) => {
  req.resume();
  req.on("end", () => {
    req.socket.setNoDelay(true);
    const url = new URL(req.url, "http://upstream");
    const q = (name, def) => Number(url.searchParams.get(name) ?? def);
    if (url.pathname.endsWith("/big")) big(res, q("bytes", 1 << 30));
    else if (url.pathname.endsWith("/events")) events(res, q("n", 200), q("gap_ms", 10));
    else { res.writeHead(404); res.end(); }
  });
}).listen(Number(process.argv[2]), "127.0.0.1");
