// A real client for the outside-in tests: Node's fetch (undici), keep-alive.
// Reads a JSON list of requests on stdin ({method, url, headers, body}) and prints a
// JSON list of answers ({status, headers, body}), sent `parallel` at a time.
const input = JSON.parse(require('fs').readFileSync(0, 'utf8'));
const parallel = Number(process.argv[2] || 1);

async function one(r) {
  const res = await fetch(r.url, {method: r.method, headers: r.headers, body: r.body});
  return {status: res.status, headers: Object.fromEntries(res.headers), body: await res.text()};
}

(async () => {
  const out = new Array(input.length);
  let next = 0;
  async function worker() {
    while (next < input.length) {
      const i = next++;
      try {
        out[i] = await one(input[i]);
      } catch (e) {
        out[i] = {status: 0, headers: {}, body: String(e && e.cause ? e.cause : e)};
      }
    }
  }
  await Promise.all(Array.from({length: parallel}, worker));
  process.stdout.write(JSON.stringify(out));
})();
