package ports

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"

	"github.com/loom-ml/loom/libs/termtext"
)

// jsonBody is grpc-gateway's JSONPb with decode errors that say what was
// wrong with the body: a body that is not JSON is named as such, with the
// line, column and byte offset where it went wrong and what to send,
// rather than encoding/json's bare "invalid character 'b' looking for
// beginning of value". Only the message changes: the generated handlers
// answer any decode error InvalidArgument, which grpc-gateway's one error
// handler maps to HTTP 400. protojson's errors (an unknown field, a wrong
// type) already name the field, and pass as they are.
type jsonBody struct {
	*runtime.JSONPb
}

// maxBodyErrorBytes bounds the message of a decode error passed on as it
// is: protojson quotes the offending token whole (an unknown field's name,
// a value of the wrong type), which a body may make megabytes long.
const maxBodyErrorBytes = 300

// sendJSON is what the caller is told to do about a body that is not JSON.
const sendJSON = "send one JSON object with the request's fields (strings in double quotes, no trailing commas); `curl --data-binary @file.json` sends a file unchanged"

// NewDecoder returns JSONPb's decoder over r, which keeps the bytes it has
// read so that a syntax error's offset can be given as a line and column.
func (j jsonBody) NewDecoder(r io.Reader) runtime.Decoder {
	seen := &bytes.Buffer{}
	d := j.JSONPb.NewDecoder(io.TeeReader(r, seen))
	return runtime.DecoderFunc(func(v any) error {
		return bodyError(d.Decode(v), seen.Bytes())
	})
}

// bodyError is err, a decode error of a body whose bytes read so far are
// seen, said as the caller's mistake when the body is not JSON; io.EOF (no
// body: the handlers take it as an empty request) is returned as it is,
// and other errors with their message cut to maxBodyErrorBytes and made
// safe to print.
func bodyError(err error, seen []byte) error {
	var syn *json.SyntaxError
	switch {
	case errors.As(err, &syn):
		at := max(int(syn.Offset)-1, 0) // Offset counts the offending byte
		line, col := lineCol(seen, at)
		return fmt.Errorf("request body: not valid JSON at line %d, column %d (byte offset %d): %v; %s", line, col, at, err, sendJSON)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("request body: not valid JSON: it ends after %d bytes before its JSON value does (an unclosed string, object or array); %s", len(seen), sendJSON)
	case err == nil || errors.Is(err, io.EOF):
		return err
	}
	// protojson's own (an unknown field, a wrong type) name the field, but
	// quote the token whole: cut, and made safe to print (termtext).
	msg := err.Error()
	if clean := termtext.Clean(msg, maxBodyErrorBytes); clean != msg {
		return errors.New(clean)
	}
	return err
}

// lineCol is the 1-based line and column (in bytes) of offset at in b.
func lineCol(b []byte, at int) (line, col int) {
	at = min(at, len(b))
	line = 1 + bytes.Count(b[:at], []byte("\n"))
	return line, at - bytes.LastIndexByte(b[:at], '\n')
}
