// An OTLP/HTTP trace receiver that checks each export against the OpenTelemetry JS
// project's own message definitions: the protobufjs root generated from
// opentelemetry-proto that @opentelemetry/otlp-transformer 0.52 ships.
//
//   node receiver.js [PORT [CERT KEY]]   listens on 127.0.0.1:PORT (0: any), over TLS
//                                        with CERT and KEY (PEM); prints {"port": N}
//
// POST /v1/traces     an export: application/json (OTLP JSON) or application/x-protobuf.
//                     A JSON body is turned into the message with fromObject once its
//                     hex ids are bytes, and must come back unchanged from toObject
//                     (an unknown field, a wrong type or a bad enum would not), then it
//                     goes through the binary encoding and back.
// GET  /received      what was decoded: {exports, spans, resources, scopes, headers, errors}
// POST /mode          how to answer exports from now on, e.g. {"answer": "ok"},
//                     {"answer": "status", "status": 503, "retry_after": "1"},
//                     {"answer": "slow", "delay_ms": 2000}, {"answer": "hang"},
//                     {"answer": "partial", "rejected": 2}
// POST /reset         forgets what was received.
"use strict";
const fs = require("fs");
const http = require("http");
const https = require("https");
const root = require("@opentelemetry/otlp-transformer/build/src/generated/root");

const Request = root.opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest;
const ID_FIELDS = new Set(["traceId", "spanId", "parentSpanId"]);
const ID_LENGTHS = { traceId: 32, spanId: 16, parentSpanId: 16 };

let mode = { answer: "ok" };
let state;
function reset() {
  state = { exports: 0, attempts: 0, spans: [], resources: [], scopes: [], headers: [], errors: [] };
}
reset();

// OTLP JSON (opentelemetry-proto docs/specification.md): ids are hex, not base64.
function idsToBytes(value, path) {
  if (Array.isArray(value)) return value.map((v, i) => idsToBytes(v, path + "[" + i + "]"));
  if (value === null || typeof value !== "object") return value;
  const out = {};
  for (const [k, v] of Object.entries(value)) {
    if (ID_FIELDS.has(k)) {
      if (typeof v !== "string" || v.length !== ID_LENGTHS[k] || !/^[0-9a-f]+$/.test(v)) {
        throw new Error(path + "." + k + " is not " + ID_LENGTHS[k] + " lowercase hex digits: " + JSON.stringify(v));
      }
      out[k] = Buffer.from(v, "hex");
    } else {
      out[k] = idsToBytes(v, path + "." + k);
    }
  }
  return out;
}

function bytesToHex(value) {
  if (Buffer.isBuffer(value) || value instanceof Uint8Array) return Buffer.from(value).toString("hex");
  if (Array.isArray(value)) return value.map(bytesToHex);
  if (value === null || typeof value !== "object") return value;
  const out = {};
  for (const [k, v] of Object.entries(value)) out[k] = bytesToHex(v);
  return out;
}

function canonical(v) {
  if (Array.isArray(v)) return v.map(canonical);
  if (v === null || typeof v !== "object") return v;
  const out = {};
  for (const k of Object.keys(v).sort()) out[k] = canonical(v[k]);
  return out;
}

function fromJson(text) {
  const json = JSON.parse(text);
  const message = Request.fromObject(idsToBytes(json, "request"));
  const back = bytesToHex(Request.toObject(message, { longs: String, enums: Number, bytes: Buffer }));
  if (JSON.stringify(canonical(back)) !== JSON.stringify(canonical(json))) {
    throw new Error("the export does not survive the message definitions unchanged:\nsent " +
      JSON.stringify(canonical(json)) + "\nread " + JSON.stringify(canonical(back)));
  }
  return message;
}

function value(any) {
  if (any.stringValue != null) return any.stringValue;
  if (any.intValue != null) return Number(any.intValue);
  if (any.boolValue != null) return any.boolValue;
  if (any.doubleValue != null) return any.doubleValue;
  return null;
}
function attributes(list) {
  const out = {};
  for (const kv of list || []) out[kv.key] = value(kv.value);
  return out;
}
const hex = (b) => (b && b.length ? Buffer.from(b).toString("hex") : "");

function record(message) {
  // Through the binary encoding and back: what a protobuf receiver would read.
  const decoded = Request.decode(Request.encode(message).finish());
  const plain = Request.toObject(decoded, { longs: String, enums: Number, bytes: Buffer });
  for (const rs of plain.resourceSpans || []) {
    state.resources.push(attributes(rs.resource && rs.resource.attributes));
    for (const ss of rs.scopeSpans || []) {
      state.scopes.push({ name: ss.scope.name, version: ss.scope.version || "" });
      for (const s of ss.spans || []) {
        state.spans.push({
          traceId: hex(s.traceId), spanId: hex(s.spanId), parentSpanId: hex(s.parentSpanId),
          name: s.name, kind: s.kind || 0,
          startTimeUnixNano: s.startTimeUnixNano, endTimeUnixNano: s.endTimeUnixNano,
          attributes: attributes(s.attributes),
          links: (s.links || []).map((l) => ({ traceId: hex(l.traceId), spanId: hex(l.spanId) })),
          status: { code: (s.status && s.status.code) || 0, message: (s.status && s.status.message) || "" },
        });
      }
    }
  }
}

function answer(res, status, body, headers = {}) {
  res.writeHead(status, Object.assign({ "Content-Type": "application/json" }, headers));
  res.end(JSON.stringify(body));
}

function onExport(req, res, body) {
  state.attempts++;
  if (mode.answer === "hang") return;  // never answers; the socket stays open
  if (mode.answer === "status") {
    const headers = mode.retry_after ? { "Retry-After": mode.retry_after } : {};
    return answer(res, mode.status, { code: 14, message: "told to fail" }, headers);
  }
  let message;
  try {
    const type = (req.headers["content-type"] || "").split(";")[0].trim();
    if (type === "application/json") message = fromJson(body.toString("utf8"));
    else if (type === "application/x-protobuf") message = Request.decode(body);
    else throw new Error("unexpected Content-Type " + type);
  } catch (e) {
    state.errors.push(String(e.message || e));
    return answer(res, 400, { code: 3, message: String(e.message || e) });
  }
  state.exports++;
  state.headers.push(req.headers);
  record(message);
  const reply = () => mode.answer === "partial"
    ? answer(res, 200, { partialSuccess: { rejectedSpans: String(mode.rejected), errorMessage: "told to" } })
    : answer(res, 200, {});
  if (mode.answer === "slow") setTimeout(reply, mode.delay_ms);
  else reply();
}

const tls = process.argv[3] ? { cert: fs.readFileSync(process.argv[3]), key: fs.readFileSync(process.argv[4]) } : null;
const handler = (req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    const body = Buffer.concat(chunks);
    if (req.method === "POST" && req.url === "/v1/traces") return onExport(req, res, body);
    if (req.method === "GET" && req.url === "/received") return answer(res, 200, state);
    if (req.method === "POST" && req.url === "/mode") {
      mode = JSON.parse(body.toString("utf8"));
      return answer(res, 200, mode);
    }
    if (req.method === "POST" && req.url === "/reset") {
      reset();
      return answer(res, 200, {});
    }
    answer(res, 404, { error: "no such path" });
  });
};
const server = tls ? https.createServer(tls, handler) : http.createServer(handler);
server.listen(Number(process.argv[2] || 0), "127.0.0.1", () => {
  process.stdout.write(JSON.stringify({ port: server.address().port }) + "\n");
});
