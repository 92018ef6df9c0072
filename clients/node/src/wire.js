// Between the API's JSON (snake_case, payload or payload_base64) and the
// client's objects (camelCase, payload a string, a JSON value or a Buffer).
// User data — payloads, headers, labels — is never renamed.

const OPAQUE = new Set(["payload", "headers", "labels"]);

const toCamel = (k) => k.replace(/_([a-z0-9])/g, (_, c) => c.toUpperCase());
const toSnake = (k) => k.replace(/[A-Z]/g, (c) => "_" + c.toLowerCase());

// A reply object as the client returns it.
export function fromWire(v) {
  if (Array.isArray(v)) return v.map(fromWire);
  if (v === null || typeof v !== "object") return v;
  const out = {};
  for (const [k, val] of Object.entries(v)) {
    if (k === "payload_base64") {
      out.payload = Buffer.from(val, "base64");
    } else if (OPAQUE.has(k)) {
      out[k] = val;
    } else {
      out[toCamel(k)] = fromWire(val);
    }
  }
  return out;
}

// Options given in camelCase as the API's fields; `undefined` is left out,
// `null` kept (it lifts a limit).
export function toWire(opts) {
  const out = {};
  for (const [k, val] of Object.entries(opts ?? {})) {
    if (val === undefined) continue;
    if (k === "payload") {
      Object.assign(out, payloadField(val));
    } else if (OPAQUE.has(k)) {
      out[k] = val;
    } else if (val instanceof Date) {
      out[toSnake(k)] = val.toISOString();
    } else if (val !== null && typeof val === "object" && !Array.isArray(val)) {
      out[toSnake(k)] = toWire(val);
    } else {
      out[toSnake(k)] = val;
    }
  }
  return out;
}

// A payload: bytes (Buffer, Uint8Array, ArrayBuffer) as payload_base64, any
// other value (a string, or JSON: object, array, number, boolean) as payload.
export function payloadField(p) {
  if (p instanceof ArrayBuffer) p = new Uint8Array(p);
  if (p instanceof Uint8Array) {
    return { payload_base64: Buffer.from(p.buffer, p.byteOffset, p.byteLength).toString("base64") };
  }
  if (p === undefined) throw new TypeError("a payload is required");
  return { payload: p };
}

export function seg(name) {
  if (typeof name !== "string" && typeof name !== "number") {
    throw new TypeError(`a name must be a string, not ${typeof name}`);
  }
  return encodeURIComponent(String(name));
}

// A query string of the set parameters.
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v === undefined || v === null) continue;
    q.set(k, v instanceof Date ? v.toISOString() : String(v));
  }
  const s = q.toString();
  return s ? "?" + s : "";
}
