// A real HTTP/2 upstream for the end-to-end tests: Node's http2 module (nghttp2
// inside), in cleartext (h2c, prior knowledge) or over TLS (ALPN h2, and with
// --http1 http/1.1 too). A second, HTTP/1.1 port reports what it saw as JSON.
//
//   node h2_upstream.js PORT CONTROL_PORT [--tls CERT KEY] [--http1]
//
// Requests:
//   any method  ?delay_ms=N (or an x-delay-ms header: gRPC paths take no query)
//               ?status=N  ?size=N (a body of N bytes, no content-length)
//               ?reset_after=N (sends N body bytes, then resets the stream)
//   the answer: JSON {order, key, protocol, method, path, authority, scheme, body_bytes,
//               body_sha, raw_headers, never_indexed}, or the bytes asked for; header
//               x-upstream-protocol.
// Control:  GET /executions   every request, in order
//           GET /goaway       every connection gets GOAWAY (its streams complete)
//           GET /sessions     {sessions, max_concurrent: the most streams one session
//                              had open at once, live: sessions open now,
//                              goaways_received: GOAWAY frames the proxy sent}
'use strict';
const http = require('http');
const http2 = require('http2');
const crypto = require('crypto');
const fs = require('fs');

const args = process.argv.slice(2);
const port = Number(args[0]);
const controlPort = Number(args[1]);
const tlsAt = args.indexOf('--tls');
const allowHTTP1 = args.includes('--http1');

const executions = [];
let sessions = 0;
let goawaysReceived = 0;  // GOAWAY frames the proxy sent
let maxConcurrent = 0;
let order = 0;

function onRequest(req, res) {
  const url = new URL(req.url, 'http://upstream');
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    const body = Buffer.concat(chunks);
    const key = req.headers['idempotency-key'] || null;
    const record = {
      order: ++order,
      key,
      protocol: req.httpVersion,
      method: req.method,
      path: req.url,
      authority: req.headers[':authority'] || req.headers.host,
      scheme: req.headers[':scheme'] || null,
      body_bytes: body.length,
      body_sha: crypto.createHash('sha256').update(body).digest('hex'),
      fencing: req.headers['idempotency-fencing-token'] || null,
      te: req.headers.te || null,
      cookie: req.headers.cookie || null,
      raw_headers: req.rawHeaders,  // name, value, name, value: every field line as sent
      // The fields that came "never indexed" (RFC 7541 §6.2.3); none over HTTP/1.1.
      never_indexed: req.headers[http2.sensitiveHeaders] || [],
    };
    executions.push(record);
    const delay = Number(url.searchParams.get('delay_ms') || req.headers['x-delay-ms'] || 0);
    setTimeout(() => {
      // A gRPC call (content-type application/grpc) says size or reset_after in
      // metadata (x-size, x-reset-after): its block is one message, then status OK, or
      // the reset 100 ms later. Any other call answers as for another content type.
      const grpc = (req.headers['content-type'] || '').startsWith('application/grpc') &&
        (req.headers['x-size'] !== undefined || req.headers['x-reset-after'] !== undefined);
      const status = grpc ? 200
        : Number(url.searchParams.get('status') || (req.method === 'POST' ? 201 : 200));
      const size = url.searchParams.get('size') ?? (grpc ? req.headers['x-size'] ?? null : null);
      const resetAfter = url.searchParams.get('reset_after') ?? req.headers['x-reset-after'] ?? null;
      res.setHeader('x-upstream-protocol', req.httpVersion);
      if (size !== null || resetAfter !== null) {
        const n = Number(size !== null ? size : resetAfter);
        res.writeHead(status, {'content-type': grpc ? 'application/grpc' : 'application/octet-stream'});
        let block = Buffer.alloc(n, 'x');
        if (grpc) {
          const prefix = Buffer.alloc(5);
          prefix.writeUInt32BE(n, 1);
          block = Buffer.concat([prefix, block]);
        }
        if (resetAfter !== null) {
          res.write(block, () => setTimeout(() => {
            if (req.stream) req.stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR);
            else req.socket.destroy();
          }, grpc ? 100 : 0));
          return;
        }
        if (grpc) res.addTrailers({'grpc-status': '0'});
        res.end(block);  // no content-length: DATA frames delimit the body
        return;
      }
      if (status === 204 || status === 304) {  // no content (RFC 9110 §15.3.5, §15.4.5)
        res.writeHead(status);
        res.end();
        return;
      }
      const text = JSON.stringify(record);
      res.writeHead(status, {'content-type': 'application/json',
                             'content-length': Buffer.byteLength(text)});
      res.end(req.method === 'HEAD' ? undefined : text);
    }, delay);
  });
}

const server = tlsAt >= 0
  ? http2.createSecureServer({cert: fs.readFileSync(args[tlsAt + 1]),
                              key: fs.readFileSync(args[tlsAt + 2]), allowHTTP1}, onRequest)
  : http2.createServer({}, onRequest);
const liveSessions = new Set();
server.on('session', (session) => {
  ++sessions;
  liveSessions.add(session);
  session.on('close', () => liveSessions.delete(session));
  session.on('goaway', () => ++goawaysReceived);
  let open = 0;
  session.on('stream', (stream) => {
    maxConcurrent = Math.max(maxConcurrent, ++open);
    stream.on('close', () => { --open; });
  });
});
server.listen(port, '127.0.0.1');

http.createServer((req, res) => {
  res.setHeader('content-type', 'application/json');
  if (req.url === '/executions') {
    res.end(JSON.stringify(executions));
  } else if (req.url === '/sessions') {
    res.end(JSON.stringify({sessions, max_concurrent: maxConcurrent, live: liveSessions.size,
                            goaways_received: goawaysReceived}));
  } else if (req.url === '/goaway') {
    // A graceful restart: GOAWAY, the streams under way complete, then the close.
    for (const session of liveSessions) session.close();
    res.end('{}');
  } else if (req.url === '/close-sessions') {
    // Ends every connection, as an upstream restart does.
    for (const c of [...openSockets]) c.destroy();
    res.end('{}');
  } else {
    res.statusCode = 404;
    res.end('{}');
  }
}).listen(controlPort, '127.0.0.1', () => console.log('ready'));

const openSockets = new Set();
server.on('connection', (socket) => {
  openSockets.add(socket);
  socket.on('close', () => openSockets.delete(socket));
});
server.on('secureConnection', (socket) => {
  openSockets.add(socket);
  socket.on('close', () => openSockets.delete(socket));
});
