package service

import (
	"os"
	"runtime/debug"
	"sync"
)

// DefaultGCPercent is the garbage collector's target (GOGC) of a process
// that runs Loom services, unless the GOGC environment variable sets one.
//
// Why not Go's 100: a service's live heap is small (state it keeps is
// mostly in Redis) while it allocates briskly (every record is decoded,
// every write encoded), so at 100 the collector runs several times a
// second: 7 % of the in-process services' CPU in a slurmbench run
// (GODEBUG=gctrace=1), 1 % at 400, for a heap that peaks at five times the
// live one — tens of megabytes here.
const DefaultGCPercent = 400

var gcOnce sync.Once

// TuneGC sets the collector's target to DefaultGCPercent unless GOGC is
// set (the user's choice wins), once per process; New calls it.
func TuneGC() {
	gcOnce.Do(func() {
		if _, set := os.LookupEnv("GOGC"); !set {
			debug.SetGCPercent(DefaultGCPercent)
		}
	})
}
