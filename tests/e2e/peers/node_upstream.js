// A real Node `http` upstream for the outside-in tests. It counts executions per
// Idempotency-Key (else per X-GitHub-Delivery, else per a JSON body's "id", as a
// webhook receiver would see them) and echoes each request's X-Ledger-Id, so a client can tell
// whether the answer it got is its own. Query parameters choose interim answers:
//   ?hints=1       103 Early Hints (res.writeEarlyHints) before the final answer
//   ?processing=1  102 Processing (res.writeProcessing)
//   ?continue=1    an unsolicited 100 Continue (res.writeContinue)
//   ?delay_ms=N    answer after N ms
//   ?status=N      final status (default 201)
//   ?trailers=1    a chunked answer ending with an X-Checksum trailer field (res.addTrailers)
//   ?policy=V      an Idempotency-Policy: V response field (V = no-store opts out of storage)
//   ?pad=N         N random hex characters more in the answer (a resource of realistic size)
//   ?echo=1        the request's header lines as Node read them (raw_headers: name, value, ...)
// GET /executions?key=K answers {"count": N}; Expect: 100-continue is honoured by
// Node itself (it sends 100 before the body is read).
const http = require('http');

const executions = new Map();
const server = http.createServer((req, res) => {
  const url = new URL(req.url, 'http://upstream');
  if (url.pathname === '/executions') {
    const n = executions.get(url.searchParams.get('key')) || 0;
    res.writeHead(200, {'Content-Type': 'application/json'});
    res.end(JSON.stringify({count: n}));
    return;
  }
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    const body = Buffer.concat(chunks);
    let key = req.headers['idempotency-key'] ?? req.headers['x-github-delivery'];
    if (key === undefined) {
      try {
        const id = JSON.parse(body.toString()).id;
        if (id !== undefined && id !== null) key = String(id);
      } catch (e) { /* not JSON: not counted */ }
    }
    if (key !== undefined) executions.set(key, (executions.get(key) || 0) + 1);
    const p = url.searchParams;
    if (p.get('hints')) res.writeEarlyHints({link: '</style.css>; rel=preload; as=style'});
    if (p.get('processing')) res.writeProcessing();
    if (p.get('continue')) res.writeContinue();
    const keyFields = [];
    for (let i = 0; i < req.rawHeaders.length; i += 2) {
      if (req.rawHeaders[i].toLowerCase() === 'idempotency-key') keyFields.push(req.rawHeaders[i + 1]);
    }
    const answer = JSON.stringify({
      id: req.headers['x-ledger-id'] || null,
      method: req.method,
      url: req.url,
      host: req.headers.host || null,
      bytes: body.length,
      key_fields: keyFields,
      content_length: req.headers['content-length'] || null,
      transfer_encoding: req.headers['transfer-encoding'] || null,
      trailers: req.trailers,
      raw_headers: p.get('echo') ? req.rawHeaders : undefined,
      pad: url.searchParams.get('pad')
        ? require('crypto').randomBytes(Math.ceil(Number(url.searchParams.get('pad')) / 2))
            .toString('hex') : undefined,
    });
    const send = () => {
      if (p.get('trailers')) {  // chunked, with trailer fields after the last chunk
        res.writeHead(Number(p.get('status') || 201),
                      {'Content-Type': 'application/json', Trailer: 'X-Checksum'});
        res.write(answer);
        res.addTrailers({'X-Checksum': String(answer.length)});
        res.end();
        return;
      }
      const head = {'Content-Type': 'application/json'};
      if (p.get('policy')) head['Idempotency-Policy'] = p.get('policy');
      res.writeHead(Number(p.get('status') || 201), head);
      res.end(answer);
    };
    const delay = Number(p.get('delay_ms') || 0);
    if (delay > 0) setTimeout(send, delay); else send();
  });
});
// KEEP_ALIVE_MS: how long an idle keep-alive connection stays open before Node closes it.
server.keepAliveTimeout = Number(process.env.KEEP_ALIVE_MS || 60000);
server.listen(0, '127.0.0.1', () => {
  console.log('listening ' + server.address().port);
});
