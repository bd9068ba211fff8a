package jobstore

import (
	"encoding/base64"
	"encoding/json"
	"unicode/utf8"
)

// decodeJobRecord parses a stored job record. A restarted scheduler decodes
// 100,000 of them before its first pass, and encoding/json spent more than
// half of that time (validating the whole input, then decoding it by
// reflection, the base64 protobuf included): records exactly as
// json.Marshal writes a jobRecord — its keys in order, strings without
// escapes, plain integers — take a direct parse; anything else (escapes,
// spaces, other key order or spelling, null, floats, out-of-range numbers)
// is left to json.Unmarshal, so a record means what encoding/json says it
// means (TestDecodeJobRecordAsJSON, FuzzDecodeJobRecord).
func decodeJobRecord(b []byte, rec *jobRecord) error {
	if decodeJobRecordDirect(b, rec) {
		return nil
	}
	*rec = jobRecord{}
	return json.Unmarshal(b, rec)
}

// decodeJobRecordDirect is decodeJobRecord's direct parse: it reports
// false, rec partly set, for a record not in json.Marshal's own form.
func decodeJobRecordDirect(b []byte, rec *jobRecord) bool {
	p := recordParser{b: b}
	if !p.lit(`{"job":"`) {
		return false
	}
	s, ok := p.str()
	if !ok {
		return false
	}
	// As encoding/json decodes a []byte.
	job := make([]byte, base64.StdEncoding.DecodedLen(len(s)))
	n, err := base64.StdEncoding.Decode(job, s)
	if err != nil {
		return false
	}
	rec.Job = job[:n]
	if p.lit(`,"attempt":`) {
		if rec.Attempt, ok = p.int32(); !ok {
			return false
		}
	}
	if p.lit(`,"model_dir":"`) {
		if s, ok = p.str(); !ok {
			return false
		}
		rec.ModelDir = string(s)
	}
	if p.lit(`,"excluded":[`) {
		for {
			if !p.lit(`"`) {
				return false
			}
			if s, ok = p.str(); !ok {
				return false
			}
			rec.Excluded = append(rec.Excluded, string(s))
			if !p.lit(`,`) {
				break
			}
		}
		if !p.lit(`]`) {
			return false
		}
	}
	if p.lit(`,"infra_restarts":`) {
		if rec.Infra, ok = p.int32(); !ok {
			return false
		}
	}
	if p.lit(`,"unlaunched_requeues":`) {
		if rec.Unlaunched, ok = p.int32(); !ok {
			return false
		}
	}
	if p.lit(`,"avoid":"`) {
		if s, ok = p.str(); !ok {
			return false
		}
		rec.Avoid = string(s)
	}
	if p.lit(`,"partitions":"`) {
		if s, ok = p.str(); !ok {
			return false
		}
		rec.Partitions = string(s)
	}
	if p.lit(`,"delta":true`) {
		rec.Delta = true
	}
	if p.lit(`,"cleared":[`) {
		for {
			v, ok := p.int32()
			if !ok {
				return false
			}
			rec.Cleared = append(rec.Cleared, v)
			if !p.lit(`,`) {
				break
			}
		}
		if !p.lit(`]`) {
			return false
		}
	}
	return p.lit(`}`) && len(p.b) == 0
}

// recordParser reads a record's bytes from the front.
type recordParser struct{ b []byte }

// lit consumes s when the input starts with it.
func (p *recordParser) lit(s string) bool {
	if len(p.b) < len(s) || string(p.b[:len(s)]) != s {
		return false
	}
	p.b = p.b[len(s):]
	return true
}

// str consumes a string's body and its closing quote (the opening one is
// read), and returns the body: false for one with an escape, a control
// character or invalid UTF-8 (which encoding/json reads otherwise than as
// its bytes), or unterminated.
func (p *recordParser) str() ([]byte, bool) {
	for i, c := range p.b {
		switch {
		case c == '"':
			s := p.b[:i]
			p.b = p.b[i+1:]
			return s, utf8.Valid(s)
		case c == '\\' || c < 0x20:
			return nil, false
		}
	}
	return nil, false
}

// int32 consumes an integer as json.Marshal writes one that fits in an
// int32 (integer's grammar).
func (p *recordParser) int32() (int32, bool) {
	n, ok := p.integer(-1<<31, 1<<31-1)
	return int32(n), ok
}
