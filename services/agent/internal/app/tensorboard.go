package app

// TensorBoard: besides its hypertune file, a step's TensorBoard event files
// are read into the same MetricsReported points. The directory is the
// job's AIP_TENSORBOARD_LOG_DIR (CustomJobs: the training service sets it)
// or LOOM_TENSORBOARD_LOG_DIR; a job that sets neither gets
// LOOM_TENSORBOARD_LOG_DIR, a directory of the run's own, as it gets
// CLOUD_ML_HP_METRIC_FILE. Only rank 0 (LOOM_NODE_RANK) of a job reads it:
// a CustomJob's directory is shared by its nodes, and each scalar must be
// sent once. Event files are read in the directory and in its
// subdirectories one level down (Keras writes train/ and validation/,
// whose tags get the subdirectory as prefix: "validation/epoch_loss").
// Only what is written after the step started is read (startOffsets).
//
// Bounds: at most tbMaxFiles files a step, tbMaxDirs subdirectories, a
// record at most tbMaxRecord bytes (a larger one, an image or a graph, is
// skipped by its length without being read), at most tbPollBytes read per
// poll. Only files owned by the job's user are read, opened without
// following links, each directory and file relative to the directory
// above it, from "/" (or from the agent's shared directory, for a
// directory in it) down: a directory named through a link (a link of the
// job's in any part of its path, a subdirectory swapped for a link after
// it was listed) is not read. The agent reads as root, in a directory the
// job names.
// Where each file was read up to goes in the tail's position, stored with
// each record sent, so that a restarted agent goes on from there.

import (
	"encoding/binary"
	"errors"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/tbevents"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
)

// The TensorBoard directory variables: Vertex's (CustomJobs) and Loom's.
const (
	EnvAIPTensorBoardDir = "AIP_TENSORBOARD_LOG_DIR"
	EnvTensorBoardDir    = "LOOM_TENSORBOARD_LOG_DIR"
)

// Bounds of a step's TensorBoard tail.
const (
	tbMaxFiles  = 64
	tbMaxDirs   = 16
	tbMaxRecord = 256 << 10
	tbPollBytes = 1 << 20
	// tbDirEntries bounds one directory listing.
	tbDirEntries = 1024
)

// tbTail follows the event files of one step's TensorBoard directory.
type tbTail struct {
	dir string
	uid uint32
	// root is where dir's walk starts when dir is in it (openPath): the
	// agent's shared directory.
	root string
	// dec per file: a tag's plugin comes with its first value only.
	dec map[string]*tbevents.Decoder
}

// tensorboardDir is the directory whose event files a step's tail reads
// ("" for none: not rank 0), setting LOOM_TENSORBOARD_LOG_DIR in replica
// (the step's added environment) when the job names none.
func (a *App) tensorboardDir(key string, env, replica map[string]string) string {
	if r := env["LOOM_NODE_RANK"]; r != "" && r != "0" {
		return ""
	}
	for _, k := range []string{EnvTensorBoardDir, EnvAIPTensorBoardDir} {
		if d := strings.TrimPrefix(env[k], "file://"); d != "" {
			if !filepath.IsAbs(d) {
				return "" // a bucket URI or a relative path: not ours to read
			}
			return filepath.Clean(d)
		}
	}
	d := filepath.Join(a.progressDir(key), "tensorboard")
	replica[EnvTensorBoardDir] = d
	return d
}

// readTensorBoard reads new records of tl's event files, at most budget
// bytes, into tl.pending: one point per step of a file, its scalars as
// values. The caller holds tl.mu.
func (a *App) readTensorBoard(key string, tl *tail, budget int64) {
	tb := tl.tb
	if tb == nil {
		return
	}
	if tl.pos.TB == nil {
		tl.pos.TB = map[string]int64{}
	}
	files := tb.files()
	if len(tl.pos.TB) >= tbMaxFiles {
		// Files gone (or past the bound) are forgotten, so the stored
		// position stays bounded however many files a program rotates
		// through.
		keep := make(map[string]bool, len(files))
		for _, f := range files {
			keep[f] = true
		}
		for f := range tl.pos.TB {
			if !keep[f] {
				delete(tl.pos.TB, f)
				delete(tb.dec, f)
			}
		}
	}
	for _, rel := range files {
		if budget <= 0 {
			return
		}
		budget -= a.readEventFile(key, tl, rel, budget)
	}
}

// startOffsets is where a step starts reading its directory: at the end of
// every event file already there. The directory may hold other runs' files
// (two tuning jobs with one base output directory give their trial k the
// same AIP_TENSORBOARD_LOG_DIR, and the first's event files stay there), so
// a step reports only what is written after it started: files made since,
// read whole, and what is appended to one that was there (a requeued
// attempt going on with its own file). Sizes decide, not times: a file's
// modification time is the file server's clock, or another node's.
func (tb *tbTail) startOffsets() map[string]int64 {
	files := tb.files()
	out := make(map[string]int64, len(files))
	for _, rel := range files {
		if size, ok := sizeIn(tb.root, tb.dir, rel, tb.uid); ok {
			out[rel] = size
		}
	}
	return out
}

// files lists the event files of the directory and of its subdirectories
// one level down, relative to it, by name, the last tbMaxFiles.
func (tb *tbTail) files() []string {
	var out []string
	names, dirs := listDir(tb.root, tb.dir, "", tb.uid)
	out = append(out, names...)
	sort.Strings(dirs)
	for i, d := range dirs {
		if i >= tbMaxDirs {
			break
		}
		sub, _ := listDir(tb.root, tb.dir, d, tb.uid)
		for _, n := range sub {
			out = append(out, d+"/"+n)
		}
	}
	// The newest by name (event file names begin with their creation
	// time): those being written.
	sort.Strings(out)
	if len(out) > tbMaxFiles {
		out = out[len(out)-tbMaxFiles:]
	}
	return out
}

// listDir returns the event files and the subdirectories of rel ("" for
// dir itself) under dir that uid owns (links are neither), rel and dir
// directories of uid's (openDirIn, from root). The path is the job's
// (LOOM_TENSORBOARD_LOG_DIR) and the agent reads it as root: it opens no
// link, never waits on the open (a FIFO there stalled the metrics of every
// step of the node), opens nothing but a directory (a device's open can
// act: a watchdog's arms it), and reads no one else's.
func listDir(root, dir, rel string, uid uint32) (files, dirs []string) {
	f, err := openDirIn(root, dir, rel, uid)
	if err != nil {
		return nil, nil
	}
	defer f.Close()
	ents, _ := f.ReadDir(tbDirEntries)
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil || !owned(fi, uid) {
			continue
		}
		switch {
		case fi.Mode().IsRegular() && tbevents.IsEventFile(e.Name()):
			files = append(files, e.Name())
		case fi.IsDir() && !strings.HasPrefix(e.Name(), "."):
			dirs = append(dirs, e.Name())
		}
	}
	return files, dirs
}

// readEventFile reads the records of one event file from its position, at
// most budget bytes, and returns how many bytes it read.
func (a *App) readEventFile(key string, tl *tail, rel string, budget int64) int64 {
	tb := tl.tb
	f, fi := openJobFileIn(tb.root, tb.dir, rel, tb.uid)
	if f == nil {
		return 0
	}
	defer f.Close()
	off := tl.pos.TB[rel]
	if fi.Size() < off {
		off = 0 // rewritten: read again
	}
	if fi.Size() == off {
		return 0
	}
	dec := tb.dec[rel]
	if dec == nil {
		if len(tb.dec) >= tbMaxFiles {
			return 0
		}
		dec = &tbevents.Decoder{}
		tb.dec[rel] = dec
	}
	prefix := ""
	if d := filepath.Dir(rel); d != "." {
		prefix = d + "/"
	}
	start := off
	var scalars []tbevents.Scalar
	for budget > off-start {
		rd := tbevents.NewReader(io.NewSectionReader(f, off, min(fi.Size()-off, budget-(off-start))), tbMaxRecord)
		data, err := rd.Next()
		if errors.Is(err, tbevents.ErrTooLarge) {
			// Skip it whole by its length (its CRC was checked).
			var h [8]byte
			if _, err := f.ReadAt(h[:], off); err != nil {
				break
			}
			next := off + 16 + int64(binary.LittleEndian.Uint64(h[:]))
			if next > fi.Size() || next < off {
				break // not all written yet
			}
			off = next
			continue
		}
		if err != nil {
			if errors.Is(err, tbevents.ErrCorrupt) {
				a.dropLine(key, tl, "tensorboard_corrupt")
				off = fi.Size() // nothing after it can be framed again
			}
			break // io.EOF, or a record not all written yet
		}
		off += rd.Offset()
		scalars, err = dec.Scalars(scalars, data)
		if err != nil {
			a.dropLine(key, tl, "tensorboard_bad_event")
		}
	}
	tl.pos.TB[rel] = off
	a.takeScalars(key, tl, prefix, scalars)
	return off - start
}

// takeScalars turns scalars into points: one per run of scalars of one
// step, named prefix+tag within the agent's name limit.
func (a *App) takeScalars(key string, tl *tail, prefix string, scalars []tbevents.Scalar) {
	lim := a.opts.Metrics.Limits
	var p *eventsv1.MetricsReported_Point
	for _, s := range scalars {
		name := prefix + s.Tag
		if name == "" || len(name) > lim.Name {
			a.dropLine(key, tl, "tensorboard_bad_tag")
			continue
		}
		if p == nil || p.Step != s.Step || len(p.Values) >= lim.Values {
			t := s.Wall
			if t.IsZero() {
				t = a.opts.Now()
			}
			p = &eventsv1.MetricsReported_Point{Step: s.Step, Time: timestamppb.New(t.Truncate(time.Microsecond)), Values: map[string]float64{}}
			tl.pending = append(tl.pending, p)
		}
		p.Values[name] = s.Value
	}
}
