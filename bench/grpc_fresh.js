// The gRPC fresh-key load: unary calls (HTTP/2, h2c prior knowledge) each with a
// new idempotency-key in its metadata, which h2load cannot vary per request.
//   node bench/grpc_fresh.js URL SECONDS CONNECTIONS STREAMS KEY_PREFIX MESSAGE_FILE
// URL names the method (http://host:port/pkg.Service/Method). MESSAGE_FILE holds the
// framed request (gRPC's 5-byte prefix, then the message). Prints one JSON line:
// calls that ended grpc-status 0, calls that did not (any other status, a reset, an
// HTTP status other than 200), and the calls per second.
'use strict';
const http2 = require('http2');
const fs = require('fs');

const [url, seconds, connections, streams, prefix, messageFile] = process.argv.slice(2);
const target = new URL(url);
const message = fs.readFileSync(messageFile);
const until = Date.now() + Number(seconds) * 1000;
let next = 0;
let ok = 0;
let failed = 0;

function call(session) {
  return new Promise((resolve) => {
    const stream = session.request({
      ':method': 'POST',
      ':path': target.pathname,
      'content-type': 'application/grpc',
      te: 'trailers',
      'idempotency-key': `${prefix}-${next++}`,
    });
    let status = 0;
    let grpcStatus = null;
    stream.on('response', (headers) => {
      status = headers[':status'];
      if (headers['grpc-status'] !== undefined) grpcStatus = headers['grpc-status'];  // trailers-only
    });
    stream.on('trailers', (trailers) => { grpcStatus = trailers['grpc-status']; });
    stream.on('data', () => {});
    stream.on('close', () => {
      if (status === 200 && grpcStatus === '0') ok++; else failed++;
      resolve();
    });
    stream.on('error', () => {});
    stream.end(message);
  });
}

async function worker(session) {
  while (Date.now() < until) await call(session);
}

async function main() {
  const started = Date.now();
  const sessions = [];
  const workers = [];
  for (let c = 0; c < Number(connections); c++) {
    const session = http2.connect(target.origin);
    session.on('error', () => {});
    sessions.push(session);
    for (let s = 0; s < Number(streams); s++) workers.push(worker(session));
  }
  await Promise.all(workers);
  const elapsed = (Date.now() - started) / 1000;
  for (const session of sessions) session.close();
  console.log(JSON.stringify({ ok, failed, rps: Math.round(ok / elapsed) }));
}

main();
