package sqlq

import (
	"encoding/base64"
	"encoding/json"
)

// payloadFields are the request fields of a payload:
//
//   - a string is sent as its text ("payload": "...");
//   - []byte as bytes ("payload_base64");
//   - json.RawMessage as the JSON value it holds;
//   - any other value as its JSON encoding (encoding/json), a JSON value:
//     the server marks it content-type: application/json and hands it back
//     as the same JSON.
func payloadFields(p any, into map[string]any) error {
	switch v := p.(type) {
	case string:
		into["payload"] = v
	case json.RawMessage:
		into["payload"] = v
	case []byte:
		into["payload_base64"] = base64.StdEncoding.EncodeToString(v)
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		into["payload"] = json.RawMessage(b)
	}
	return nil
}

// wirePayload is a payload as a reply carries it.
type wirePayload struct {
	Payload       json.RawMessage `json:"payload"`
	PayloadBase64 []byte          `json:"payload_base64"`
}

// bytes are the payload's bytes: the text of a string, the decoded base64,
// or the JSON text of a JSON value.
func (w wirePayload) bytes() []byte {
	if w.PayloadBase64 != nil {
		return w.PayloadBase64
	}
	if len(w.Payload) == 0 || string(w.Payload) == "null" {
		return nil
	}
	if w.Payload[0] == '"' {
		var s string
		if json.Unmarshal(w.Payload, &s) == nil {
			return []byte(s)
		}
	}
	return []byte(w.Payload)
}

// Payload is a message's (or entry's, or item's) payload: its bytes as
// stored, that is the UTF-8 of a text, the bytes of a binary payload, or
// the JSON text of a payload sent as a JSON value.
type Payload []byte

// String is the payload as text.
func (p Payload) String() string { return string(p) }

// Decode unmarshals a JSON payload into v (encoding/json).
func (p Payload) Decode(v any) error { return json.Unmarshal(p, v) }

// decodeWithPayload decodes a reply object into v (a pointer to a type of
// the same fields without an UnmarshalJSON of its own) and its payload into
// *p.
func decodeWithPayload(b []byte, v any, p *Payload) error {
	if err := json.Unmarshal(b, v); err != nil {
		return err
	}
	var w wirePayload
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*p = w.bytes()
	return nil
}
