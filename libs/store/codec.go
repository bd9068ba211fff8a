package store

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/segmentio/kafka-go"
)

// Outbox entry fields. Each entry is one kafka.Message as envelope.Encode
// made it: topic, key and value as they are, and the headers packed into one
// field (see encodeHeaders), so an entry costs four short fields.
const (
	fieldTopic   = "t"
	fieldKey     = "k"
	fieldValue   = "v"
	fieldHeaders = "h"
)

// encodeHeaders packs headers as a sequence of (uvarint length, key, uvarint
// length, value). The order of headers is kept.
func encodeHeaders(hs []kafka.Header) []byte {
	n := 0
	for _, h := range hs {
		n += 2*binary.MaxVarintLen32 + len(h.Key) + len(h.Value)
	}
	b := make([]byte, 0, n)
	for _, h := range hs {
		b = binary.AppendUvarint(b, uint64(len(h.Key)))
		b = append(b, h.Key...)
		b = binary.AppendUvarint(b, uint64(len(h.Value)))
		b = append(b, h.Value...)
	}
	return b
}

var errBadHeaders = errors.New("bad header encoding")

// decodeHeaders reverses encodeHeaders.
func decodeHeaders(b []byte) ([]kafka.Header, error) {
	var hs []kafka.Header
	next := func() ([]byte, error) {
		l, n := binary.Uvarint(b)
		if n <= 0 || l > uint64(len(b)-n) {
			return nil, errBadHeaders
		}
		v := b[n : n+int(l)]
		b = b[n+int(l):]
		return v, nil
	}
	for len(b) > 0 {
		k, err := next()
		if err != nil {
			return nil, err
		}
		v, err := next()
		if err != nil {
			return nil, err
		}
		hs = append(hs, kafka.Header{Key: string(k), Value: v})
	}
	return hs, nil
}

// decodeEntry turns an outbox stream entry back into the message it holds.
func decodeEntry(values map[string]any) (kafka.Message, error) {
	str := func(f string) (string, error) {
		v, ok := values[f]
		if !ok {
			return "", fmt.Errorf("field %q missing", f)
		}
		s, ok := v.(string)
		if !ok {
			return "", fmt.Errorf("field %q is %T", f, v)
		}
		return s, nil
	}
	var m kafka.Message
	var err error
	if m.Topic, err = str(fieldTopic); err != nil {
		return m, err
	}
	if m.Topic == "" {
		return m, errors.New("empty topic")
	}
	k, err := str(fieldKey)
	if err != nil {
		return m, err
	}
	v, err := str(fieldValue)
	if err != nil {
		return m, err
	}
	h, err := str(fieldHeaders)
	if err != nil {
		return m, err
	}
	if m.Headers, err = decodeHeaders([]byte(h)); err != nil {
		return m, err
	}
	m.Key, m.Value = []byte(k), []byte(v)
	return m, nil
}
