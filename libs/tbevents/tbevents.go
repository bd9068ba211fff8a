// Package tbevents reads and writes TensorBoard event files: TFRecord
// framing around TensorBoard's Event protos (proto/tensorboard, compiled
// from TensorBoard's own .proto files).
//
// A TFRecord is
//
//	uint64 length (little-endian)
//	uint32 masked CRC32C of the 8 length bytes
//	length bytes of data (a serialized Event)
//	uint32 masked CRC32C of the data
//
// where a CRC is masked as ((crc>>15)|(crc<<17)) + 0xa282ead8. The Reader
// checks both CRCs, refuses a length above its bound before allocating
// anything (a hostile or corrupt length field never makes it allocate more
// than the bound), and tells a record cut short (a file still being
// written: io.ErrUnexpectedEOF, read it again later from Offset) from a
// corrupt one (ErrCorrupt).
//
// Scalars come from two shapes of summary value: simple_value (TF1,
// tensorboardX, PyTorch, Loom's Writer) and a rank-0 DT_FLOAT/DT_DOUBLE
// tensor (TF2's tf.summary.scalar, plugin "scalars", whose metadata comes
// only with a tag's first value: a Decoder remembers it).
package tbevents

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"time"

	"google.golang.org/protobuf/proto"

	tbpb "github.com/loom-ml/loom/proto/tensorboard"
)

// DefaultMaxRecord is the largest record a Reader made with max 0 accepts
// (16 MiB): scalars' events are tens of bytes; a graph or an image may be
// large, and is skipped whole rather than read.
const DefaultMaxRecord = 16 << 20

// headerLen and footerLen frame a record's data.
const (
	headerLen = 12
	footerLen = 4
)

// ErrCorrupt is a record whose length or data does not match its CRC.
var ErrCorrupt = errors.New("tbevents: corrupt record (CRC mismatch)")

// ErrTooLarge is a record whose length field is above the Reader's bound.
var ErrTooLarge = errors.New("tbevents: record longer than the reader's bound")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// MaskedCRC is TFRecord's masked CRC32C of b.
func MaskedCRC(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	return ((c >> 15) | (c << 17)) + 0xa282ead8
}

// Reader reads TFRecords. It is not safe for concurrent use.
type Reader struct {
	r   io.Reader
	max int
	off int64
	hdr [headerLen]byte
	buf []byte
}

// NewReader reads records from r, each at most max bytes of data
// (DefaultMaxRecord when max <= 0).
func NewReader(r io.Reader, max int) *Reader {
	if max <= 0 {
		max = DefaultMaxRecord
	}
	return &Reader{r: r, max: max}
}

// Offset is how many bytes of whole records Next has returned: where to
// read on from after io.ErrUnexpectedEOF.
func (r *Reader) Offset() int64 { return r.off }

// Next returns the next record's data, valid until the following call. At
// the end of the input it returns io.EOF; within a record cut short,
// io.ErrUnexpectedEOF; a CRC mismatch is ErrCorrupt and a length above the
// bound ErrTooLarge (the stream cannot be resynchronised after either).
func (r *Reader) Next() ([]byte, error) {
	n, err := io.ReadFull(r.r, r.hdr[:])
	if err != nil {
		if n == 0 && errors.Is(err, io.EOF) {
			return nil, io.EOF
		}
		return nil, io.ErrUnexpectedEOF
	}
	if binary.LittleEndian.Uint32(r.hdr[8:]) != MaskedCRC(r.hdr[:8]) {
		return nil, fmt.Errorf("%w: length at offset %d", ErrCorrupt, r.off)
	}
	length := binary.LittleEndian.Uint64(r.hdr[:8])
	if length > uint64(r.max) {
		return nil, fmt.Errorf("%w: %d bytes at offset %d (bound %d)", ErrTooLarge, length, r.off, r.max)
	}
	need := int(length) + footerLen
	if cap(r.buf) < need {
		r.buf = make([]byte, need)
	}
	b := r.buf[:need]
	if _, err := io.ReadFull(r.r, b); err != nil {
		return nil, io.ErrUnexpectedEOF
	}
	data := b[:length]
	if binary.LittleEndian.Uint32(b[length:]) != MaskedCRC(data) {
		return nil, fmt.Errorf("%w: data at offset %d", ErrCorrupt, r.off)
	}
	r.off += int64(headerLen + need)
	return data, nil
}

// AppendRecord appends data framed as a TFRecord to dst.
func AppendRecord(dst, data []byte) []byte {
	var h [headerLen]byte
	binary.LittleEndian.PutUint64(h[:8], uint64(len(data)))
	binary.LittleEndian.PutUint32(h[8:], MaskedCRC(h[:8]))
	dst = append(dst, h[:]...)
	dst = append(dst, data...)
	return binary.LittleEndian.AppendUint32(dst, MaskedCRC(data))
}

// Scalar is one scalar summary value.
type Scalar struct {
	Tag   string
	Step  int64
	Wall  time.Time
	Value float64
}

// Decoder turns events into scalars, remembering which plugin each tag's
// first value named (TF2 writes a tag's metadata only once). Its memory is
// bounded by MaxTags. It is not safe for concurrent use.
type Decoder struct {
	plugins map[string]string
}

// MaxTags bounds how many tags' plugins a Decoder remembers; beyond it a
// tensor value whose tag came without metadata is judged by its shape
// alone (a rank-0 float is a scalar).
const MaxTags = 10000

// Tag plugin names (SummaryMetadata.plugin_data.plugin_name).
const pluginScalars = "scalars"

// Scalars decodes one record's Event and appends its scalar values to dst.
// A record that is not an Event is an error; an Event without scalars
// (file_version, graph, histograms, images, ...) yields nothing.
func (d *Decoder) Scalars(dst []Scalar, data []byte) ([]Scalar, error) {
	var ev tbpb.Event
	if err := proto.Unmarshal(data, &ev); err != nil {
		return dst, fmt.Errorf("tbevents: not an Event: %w", err)
	}
	sum := ev.GetSummary()
	if sum == nil {
		return dst, nil
	}
	if d.plugins == nil {
		d.plugins = map[string]string{}
	}
	wall := wallTime(ev.GetWallTime())
	for _, v := range sum.GetValue() {
		tag := v.GetTag()
		if tag == "" {
			tag = v.GetNodeName() // TF1's old name for it
		}
		if md := v.GetMetadata(); md != nil && md.GetPluginData() != nil {
			if _, ok := d.plugins[tag]; ok || len(d.plugins) < MaxTags {
				d.plugins[tag] = md.GetPluginData().GetPluginName()
			}
		}
		switch x := v.GetValue().(type) {
		case *tbpb.Summary_Value_SimpleValue:
			dst = append(dst, Scalar{Tag: tag, Step: ev.GetStep(), Wall: wall, Value: float64(x.SimpleValue)})
		case *tbpb.Summary_Value_Tensor:
			plugin, known := d.plugins[tag]
			if known && plugin != pluginScalars {
				continue
			}
			if val, ok := tensorScalar(x.Tensor); ok {
				dst = append(dst, Scalar{Tag: tag, Step: ev.GetStep(), Wall: wall, Value: val})
			}
		}
	}
	return dst, nil
}

// tensorScalar is a rank-0 (or one-element) float or double tensor's value.
func tensorScalar(t *tbpb.TensorProto) (float64, bool) {
	n := int64(1)
	for _, d := range t.GetTensorShape().GetDim() {
		n *= d.GetSize()
	}
	if n != 1 {
		return 0, false
	}
	c := t.GetTensorContent()
	switch t.GetDtype() {
	case tbpb.DataType_DT_FLOAT:
		if len(c) == 4 {
			return float64(math.Float32frombits(binary.LittleEndian.Uint32(c))), true
		}
		if f := t.GetFloatVal(); len(f) > 0 {
			return float64(f[0]), true
		}
	case tbpb.DataType_DT_DOUBLE:
		if len(c) == 8 {
			return math.Float64frombits(binary.LittleEndian.Uint64(c)), true
		}
		if f := t.GetDoubleVal(); len(f) > 0 {
			return f[0], true
		}
	}
	return 0, false
}

// wallTime converts an Event's wall_time (seconds since the epoch).
func wallTime(s float64) time.Time {
	if s <= 0 || math.IsNaN(s) || math.IsInf(s, 0) || s > 1e11 {
		return time.Time{}
	}
	sec, frac := math.Modf(s)
	return time.Unix(int64(sec), int64(frac*1e9)).UTC()
}

// ReadScalars reads every scalar of a whole event file from r, records of
// at most max bytes (DefaultMaxRecord when 0). A file whose last record is
// cut short yields the scalars before it and io.ErrUnexpectedEOF.
func ReadScalars(r io.Reader, max int) ([]Scalar, error) {
	rd := NewReader(r, max)
	var d Decoder
	var out []Scalar
	for {
		data, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		if out, err = d.Scalars(out, data); err != nil {
			return out, err
		}
	}
}
