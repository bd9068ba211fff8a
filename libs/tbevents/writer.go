package tbevents

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"google.golang.org/protobuf/proto"

	tbpb "github.com/loom-ml/loom/proto/tensorboard"
)

// FileVersion is the file_version of the first event of every file
// TensorBoard writes, and of the Writer's.
const FileVersion = "brain.Event:2"

// Writer writes an event file: a file_version event, then scalars as
// simple_value summaries (what every TensorBoard version reads). It buffers;
// Flush makes what was added readable. It is not safe for concurrent use.
type Writer struct {
	w   *bufio.Writer
	buf []byte
}

// NewWriter starts an event file on w, with its file_version event stamped
// now.
func NewWriter(w io.Writer, now time.Time) (*Writer, error) {
	wr := &Writer{w: bufio.NewWriter(w)}
	err := wr.event(&tbpb.Event{WallTime: seconds(now), What: &tbpb.Event_FileVersion{FileVersion: FileVersion}})
	return wr, err
}

// AddScalar adds one value of tag at step, taken at wall.
func (w *Writer) AddScalar(tag string, step int64, wall time.Time, v float64) error {
	return w.event(&tbpb.Event{WallTime: seconds(wall), Step: step, What: &tbpb.Event_Summary{Summary: &tbpb.Summary{
		Value: []*tbpb.Summary_Value{{Tag: tag, Value: &tbpb.Summary_Value_SimpleValue{SimpleValue: float32(v)}}},
	}}})
}

// Flush writes what is buffered to the underlying writer.
func (w *Writer) Flush() error { return w.w.Flush() }

func (w *Writer) event(ev *tbpb.Event) error {
	data, err := proto.Marshal(ev)
	if err != nil {
		return err
	}
	w.buf = AppendRecord(w.buf[:0], data)
	_, err = w.w.Write(w.buf)
	return err
}

func seconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// FileName is the name TensorBoard gives an event file:
// events.out.tfevents.{unix seconds}.{host}. TensorBoard and the agent find
// event files by its prefix.
func FileName(now time.Time, host string) string {
	return "events.out.tfevents." + strconv.FormatInt(now.Unix(), 10) + "." + host
}

// IsEventFile reports whether a file name is an event file's.
func IsEventFile(name string) bool {
	return len(name) > len(filePrefix) && name[:len(filePrefix)] == filePrefix
}

const filePrefix = "events.out.tfevents."

// FileWriter is a Writer on a file of its own.
type FileWriter struct {
	*Writer
	f *os.File
}

// Create makes dir (and its parents, 0700) and a new event file in it
// (0600: a job's files are its owner's), named FileName(now, host).
func Create(dir, host string, now time.Time) (*FileWriter, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("tensorboard log dir: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, FileName(now, host)), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("tensorboard event file: %w", err)
	}
	w, err := NewWriter(f, now)
	if err != nil {
		f.Close()
		return nil, err
	}
	return &FileWriter{Writer: w, f: f}, nil
}

// Close flushes and closes the file.
func (f *FileWriter) Close() error {
	err := f.Flush()
	if cerr := f.f.Close(); err == nil {
		err = cerr
	}
	return err
}
