package tbevents

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	tbpb "github.com/loom-ml/loom/proto/tensorboard"
)

// tfFile is an event file TensorFlow 2 wrote (tf.summary.scalar), kept in
// the shared test data.
const tfFile = "/work/shared/data/tensorboard/events.out.tfevents.1585499054.v2"

func readTF(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(tfFile)
	if err != nil {
		t.Skipf("TensorFlow's event file is not here: %v", err)
	}
	return b
}

// TestReadTensorFlowFile parses a file TensorFlow wrote: its scalars are
// tensors (plugin "scalars"), not simple_values.
func TestReadTensorFlowFile(t *testing.T) {
	t.Parallel()
	b := readTF(t)
	rd := NewReader(bytes.NewReader(b), 0)
	records, tensors := 0, 0
	version := ""
	for {
		data, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("record %d: %v", records, err)
		}
		records++
		var ev tbpb.Event
		if err := proto.Unmarshal(data, &ev); err != nil {
			t.Fatal(err)
		}
		if v := ev.GetFileVersion(); v != "" {
			version = v
		}
		for _, v := range ev.GetSummary().GetValue() {
			if v.GetTensor() != nil {
				tensors++
			}
		}
	}
	if version != FileVersion {
		t.Errorf("file_version %q, want %q", version, FileVersion)
	}
	if rd.Offset() != int64(len(b)) {
		t.Errorf("offset %d after the last record, file is %d bytes", rd.Offset(), len(b))
	}
	if tensors != 100 {
		t.Errorf("%d tensor values, want 100 (TF2 writes scalars as tensors)", tensors)
	}

	got, err := ReadScalars(bytes.NewReader(b), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 100 {
		t.Fatalf("%d scalars, want 100", len(got))
	}
	for i, s := range got {
		if s.Tag != "my_metric" || s.Step != int64(i) || s.Value != float64(i)*0.5 {
			t.Fatalf("scalar %d = %+v, want my_metric step %d value %v", i, s, i, float64(i)*0.5)
		}
	}
	if w := got[0].Wall; w.Year() != 2020 || w.Unix() != 1585499054 {
		t.Errorf("first wall time %v, want 2020-03-29 16:24:14 UTC", w)
	}
}

// TestCorruptCRC flips one bit of the data, then one of the length: both
// are ErrCorrupt, never a panic or a wrong value.
func TestCorruptCRC(t *testing.T) {
	t.Parallel()
	b := readTF(t)
	for _, at := range []int{3, 20, 8} { // length byte, data byte, length CRC
		c := bytes.Clone(b)
		c[at] ^= 0x10
		_, err := NewReader(bytes.NewReader(c), 0).Next()
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("bit flipped at %d: %v, want ErrCorrupt", at, err)
		}
	}
	// A data CRC wrong in the middle of the file: the records before it
	// come back, then the error.
	data := []byte("hello")
	var f []byte
	f = AppendRecord(f, data)
	f = AppendRecord(f, data)
	f[len(f)-1] ^= 1
	rd := NewReader(bytes.NewReader(f), 0)
	if got, err := rd.Next(); err != nil || string(got) != "hello" {
		t.Fatalf("first record: %q %v", got, err)
	}
	if _, err := rd.Next(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("second record: %v, want ErrCorrupt", err)
	}
}

// TestTruncated cuts the file within its last record: the complete records
// come back, then io.ErrUnexpectedEOF, with Offset where the cut record
// starts (where a tail reads on from once the writer finished it).
func TestTruncated(t *testing.T) {
	t.Parallel()
	b := readTF(t)
	full, err := ReadScalars(bytes.NewReader(b), 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, cut := range []int{1, 5, 12, 20} {
		rd := NewReader(bytes.NewReader(b[:len(b)-cut]), 0)
		var d Decoder
		var got []Scalar
		for {
			data, err := rd.Next()
			if err != nil {
				if !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("cut %d: %v, want io.ErrUnexpectedEOF", cut, err)
				}
				break
			}
			if got, err = d.Scalars(got, data); err != nil {
				t.Fatal(err)
			}
		}
		if len(got) != len(full)-1 {
			t.Errorf("cut %d: %d scalars, want %d", cut, len(got), len(full)-1)
		}
		// Reading on from Offset over the whole file yields the last one.
		rest, err := ReadScalars(bytes.NewReader(b[rd.Offset():]), 0)
		if err != nil || len(rest) != 1 || rest[0] != full[len(full)-1] {
			t.Errorf("cut %d: read on from %d: %v %v", cut, rd.Offset(), rest, err)
		}
	}
}

// TestHugeLength: a length field of 2^63 with a valid CRC is refused before
// anything is allocated for it.
func TestHugeLength(t *testing.T) {
	t.Parallel()
	var h [12]byte
	binary.LittleEndian.PutUint64(h[:8], 1<<63)
	binary.LittleEndian.PutUint32(h[8:], MaskedCRC(h[:8]))
	rd := NewReader(bytes.NewReader(h[:]), 1024)
	if _, err := rd.Next(); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("%v, want ErrTooLarge", err)
	}
	if rd.buf != nil {
		t.Errorf("a buffer of %d bytes was made for a refused length", cap(rd.buf))
	}
}

// TestRoundTrip writes scalars with Writer into a file made by Create and
// reads them back, values as float32 as TensorBoard keeps them.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "logs")
	now := time.Unix(1700000000, 250_000_000)
	w, err := Create(dir, "host-1", now)
	if err != nil {
		t.Fatal(err)
	}
	vals := []float64{0.5, -1.25, math.Inf(1), 3e-9}
	for i, v := range vals {
		if err := w.AddScalar("loss", int64(i*10), now.Add(time.Duration(i)*time.Second), v); err != nil {
			t.Fatal(err)
		}
		if err := w.AddScalar("eval/accuracy", int64(i*10), now, float64(i)/4); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	name := filepath.Join(dir, "events.out.tfevents.1700000000.host-1")
	if !IsEventFile(filepath.Base(name)) {
		t.Fatal("IsEventFile refuses the writer's own name")
	}
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := ReadScalars(f, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2*len(vals) {
		t.Fatalf("%d scalars, want %d", len(got), 2*len(vals))
	}
	for i, v := range vals {
		s := got[2*i]
		if s.Tag != "loss" || s.Step != int64(i*10) || s.Value != float64(float32(v)) {
			t.Errorf("scalar %d: %+v, want loss %d %v", i, s, i*10, v)
		}
		if want := now.Add(time.Duration(i) * time.Second); s.Wall.Sub(want).Abs() > time.Microsecond {
			t.Errorf("scalar %d wall %v, want %v", i, s.Wall, want)
		}
		if a := got[2*i+1]; a.Tag != "eval/accuracy" || a.Value != float64(i)/4 {
			t.Errorf("accuracy %d: %+v", i, a)
		}
	}
}

// TestTensorForms decodes the tensor shapes TF writes scalars in
// (tensor_content and float_val/double_val), and passes over a tensor of
// another plugin whose metadata came with an earlier event.
func TestTensorForms(t *testing.T) {
	t.Parallel()
	content := make([]byte, 8)
	binary.LittleEndian.PutUint64(content, math.Float64bits(2.5))
	scalars := &tbpb.SummaryMetadata{PluginData: &tbpb.SummaryMetadata_PluginData{PluginName: "scalars"}}
	hist := &tbpb.SummaryMetadata{PluginData: &tbpb.SummaryMetadata_PluginData{PluginName: "histograms"}}
	evs := []*tbpb.Event{
		{Step: 1, What: &tbpb.Event_Summary{Summary: &tbpb.Summary{Value: []*tbpb.Summary_Value{
			{Tag: "a", Metadata: scalars, Value: &tbpb.Summary_Value_Tensor{Tensor: &tbpb.TensorProto{Dtype: tbpb.DataType_DT_DOUBLE, TensorContent: content}}},
			{Tag: "h", Metadata: hist, Value: &tbpb.Summary_Value_Tensor{Tensor: &tbpb.TensorProto{Dtype: tbpb.DataType_DT_DOUBLE, DoubleVal: []float64{9}}}},
		}}}},
		{Step: 2, What: &tbpb.Event_Summary{Summary: &tbpb.Summary{Value: []*tbpb.Summary_Value{
			{Tag: "a", Value: &tbpb.Summary_Value_Tensor{Tensor: &tbpb.TensorProto{Dtype: tbpb.DataType_DT_FLOAT, FloatVal: []float32{1.5}}}},
			{Tag: "h", Value: &tbpb.Summary_Value_Tensor{Tensor: &tbpb.TensorProto{Dtype: tbpb.DataType_DT_DOUBLE, DoubleVal: []float64{9}}}},
			{Tag: "img", Value: &tbpb.Summary_Value_Tensor{Tensor: &tbpb.TensorProto{Dtype: tbpb.DataType_DT_STRING}}},
		}}}},
	}
	var d Decoder
	var got []Scalar
	for _, ev := range evs {
		b, err := proto.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		if got, err = d.Scalars(got, b); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 2 || got[0].Value != 2.5 || got[1].Value != 1.5 || got[1].Step != 2 {
		t.Fatalf("got %+v, want a=2.5@1 and a=1.5@2 only", got)
	}
}

// FuzzReader: whatever the bytes, reading never panics and never allocates
// beyond the bound for one record.
func FuzzReader(f *testing.F) {
	if b, err := os.ReadFile(tfFile); err == nil {
		f.Add(b)
	}
	f.Add(AppendRecord(nil, []byte("x")))
	var h [12]byte
	binary.LittleEndian.PutUint64(h[:8], math.MaxUint64)
	binary.LittleEndian.PutUint32(h[8:], MaskedCRC(h[:8]))
	f.Add(h[:])
	f.Fuzz(func(t *testing.T, b []byte) {
		const bound = 4096
		rd := NewReader(bytes.NewReader(b), bound)
		var d Decoder
		var out []Scalar
		for i := 0; i < 1000; i++ {
			data, err := rd.Next()
			if err != nil {
				break
			}
			if len(data) > bound || cap(rd.buf) > bound+footerLen {
				t.Fatalf("record of %d bytes (buffer %d) past the bound %d", len(data), cap(rd.buf), bound)
			}
			out, _ = d.Scalars(out[:0], data)
		}
	})
}
