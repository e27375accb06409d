// Validates Kubernetes objects (a JSON array on stdin) against the Kubernetes API
// schemas that the kubernetes-models package carries, offline. Prints one JSON line
// per object: {"kind", "name", "error"} (error is null when the object is valid).
"use strict";

const input = require("fs").readFileSync(0, "utf8");
for (const obj of JSON.parse(input)) {
  const [group, version] = obj.apiVersion.includes("/")
    ? obj.apiVersion.split("/")
    : ["", obj.apiVersion];
  const module = group ? `kubernetes-models/${group}/${version}/${obj.kind}`
                       : `kubernetes-models/${version}/${obj.kind}`;
  let error = null;
  try {
    const Model = require(module)[obj.kind];
    new Model(obj).validate();
  } catch (e) {
    error = String(e && e.message ? e.message : e);
  }
  console.log(JSON.stringify({ kind: obj.kind, name: obj.metadata.name, error }));
}
