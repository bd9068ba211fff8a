package domain

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/termtext"
)

// Size limits. Every command the gateway accepts is one Kafka record, and a
// record the broker refuses can never be published: the relay would retry
// it forever. So each field is bounded, and so is each command as a whole,
// well inside what the broker takes; the errors name the field and the limit.
const (
	// MaxRecordBytes is the largest record Loom's producer writes: kafka-go's
	// Writer.BatchBytes default (1 MiB), a little under the broker's
	// message.max.bytes default (1,048,588 in Kafka and in kfake).
	MaxRecordBytes = 1 << 20
	// MaxCommandBytes bounds the encoded payload of one accepted command:
	// half a record, leaving room for the envelope's headers and for what the
	// scheduler adds to the job events and step commands that carry a job on
	// (its nodes, its runs).
	MaxCommandBytes = MaxRecordBytes / 2
	// MaxArrayBytes bounds an array's tasks' job records together (its
	// task count times its job's encoded size): each task is a job in the
	// scheduler's events and state. 64 KiB a task for the largest default
	// array (1,001 tasks): a script and a login shell's whole environment
	// take a few KiB.
	MaxArrayBytes = 64 << 20

	// MaxScriptBytes bounds a job's batch script.
	MaxScriptBytes = 256 << 10
	// MaxArgs and MaxArgvBytes bound a command (a job's or a step's): how
	// many arguments, and their bytes together.
	MaxArgs      = 4096
	MaxArgvBytes = 128 << 10
	// MaxEnvVars and MaxEnvBytes bound an environment (a job's or a
	// step's): how many variables, and their names and values together.
	MaxEnvVars  = 4096
	MaxEnvBytes = 128 << 10
	// MaxNameBytes bounds names and identities shown in squeue, sinfo and
	// sacct rows: a job's display name, users, accounts, QOS, GPU types,
	// partitions, submit hosts, list filters.
	MaxNameBytes = 256
	// MaxReasonBytes bounds a node's drain reason (sinfo -R).
	MaxReasonBytes = 1024
	// MaxPathBytes bounds a path or file pattern (Linux's PATH_MAX).
	MaxPathBytes = 4096
	// MaxSpecBytes bounds a Slurm option string the gateway parses
	// (dependency, array, signal, export).
	MaxSpecBytes = 64 << 10
	// MaxHosts bounds a job's nodelist and exclude lists.
	MaxHosts = 4096
	// MaxDescriptionBytes bounds a cluster's description.
	MaxDescriptionBytes = 4096
	// MaxRequestIDBytes bounds a request_id (it names a Redis key and an
	// inbox entry kept for a week).
	MaxRequestIDBytes = 128
	// MaxEtagBytes bounds an etag a request sends (a cluster's is 32
	// bytes; the gateway quotes one it refuses back in its answer).
	MaxEtagBytes = 128
	// MaxFilterValues bounds each ListJobs filter list.
	MaxFilterValues = 1000
)

// clip returns s quoted for an error message, cut to its first 64 bytes:
// an error names a refused value without echoing megabytes of it.
func clip(s string) string {
	const n = 64
	if len(s) <= n {
		return fmt.Sprintf("%q", s)
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%q… (%d bytes)", s[:cut], len(s))
}

// checkText adds to v a violation of field when s is longer than max bytes
// or holds a control character: the rule for text Slurm's commands print
// in rows (names, users, reasons, partitions, accounts, paths). It reports
// whether s passed, for callers whose further checks need it to.
func checkText(v *errs.Validator, field, s string, max int) bool {
	return checkTextAllowing(v, field, s, max, "")
}

// checkTextAllowing is checkText letting s hold the control characters in allow.
func checkTextAllowing(v *errs.Validator, field, s string, max int, allow string) bool {
	if len(s) > max {
		v.Add(field, "%d bytes, longer than the limit of %d", len(s), max)
		return false
	}
	if r, bad := termtext.FirstSpoofing(s, allow); bad {
		v.Add(field, "%s holds the control character %U; names and text shown in squeue and sinfo rows may not", clip(s), r)
		return false
	}
	return true
}

// checkBytes adds to v a violation of field when s is longer than max bytes
// or holds a NUL, which no process can receive in an argument, a variable
// or a script (the job would fail at launch instead of here).
func checkBytes(v *errs.Validator, field, s string, max int) {
	switch {
	case len(s) > max:
		v.Add(field, "%d bytes, longer than the limit of %d", len(s), max)
	case strings.IndexByte(s, 0) >= 0:
		v.Add(field, "holds a NUL byte at offset %d; a process cannot receive one", strings.IndexByte(s, 0))
	}
}

// checkArgv checks a command: at most MaxArgs arguments of MaxArgvBytes
// together, none holding a NUL.
func checkArgv(v *errs.Validator, field string, argv []string) {
	if len(argv) > MaxArgs {
		v.Add(field, "%d arguments, more than the limit of %d", len(argv), MaxArgs)
		return
	}
	total := 0
	for i, a := range argv {
		total += len(a)
		if strings.IndexByte(a, 0) >= 0 {
			v.Add(fmt.Sprintf("%s[%d]", field, i), "holds a NUL byte at offset %d; a process cannot receive one", strings.IndexByte(a, 0))
		}
	}
	v.Check(total <= MaxArgvBytes, field, "%d bytes of arguments, more than the limit of %d", total, MaxArgvBytes)
}

// checkEnv checks an environment: at most MaxEnvVars variables whose names
// and values come to at most MaxEnvBytes, values without a NUL (names are
// checked by the caller's rule).
func checkEnv(v *errs.Validator, field string, env map[string]string) {
	if len(env) > MaxEnvVars {
		v.Add(field, "%d variables, more than the limit of %d", len(env), MaxEnvVars)
		return
	}
	total := 0
	for k, val := range env {
		total += len(k) + len(val) + 2 // "k=v\0", as the process gets it
		if strings.IndexByte(val, 0) >= 0 {
			v.Add(field+"["+clipKey(k)+"]", "value holds a NUL byte; a process cannot receive one")
		}
	}
	v.Check(total <= MaxEnvBytes, field, "%d bytes of variables, more than the limit of %d", total, MaxEnvBytes)
}

// clipKey is a map key as a field path shows it, cut like clip.
func clipKey(k string) string {
	if len(k) <= 64 && !strings.ContainsAny(k, "\x00[]") {
		if _, bad := termtext.FirstSpoofing(k, ""); !bad {
			return k
		}
	}
	return strings.Trim(clip(k), `"`)
}

// checkRequestID bounds a request_id (any text without control characters).
func checkRequestID(v *errs.Validator, id string) {
	checkText(v, "request_id", id, MaxRequestIDBytes)
}

// CheckEtag checks the etag a request sends in field: at most MaxEtagBytes,
// no control characters (whether it is the resource's is for its owner to
// say).
func CheckEtag(field, etag string) error {
	var v errs.Validator
	checkText(&v, field, etag, MaxEtagBytes)
	return v.Err()
}

// checkCommandSize adds to v a violation of field when cmd, the payload of
// the command a request becomes, encodes to more than MaxCommandBytes.
// CheckCommandSize is checkCommandSize for a command built outside this
// package: an InvalidError naming field, or nil.
func CheckCommandSize(field string, cmd proto.Message) error {
	var v errs.Validator
	checkCommandSize(&v, field, cmd)
	return v.Err()
}

func checkCommandSize(v *errs.Validator, field string, cmd proto.Message) {
	if n := proto.Size(cmd); n > MaxCommandBytes {
		v.Add(field, "is %d bytes encoded, more than the limit of %d for one request (half of a %d-byte Kafka record)",
			n, MaxCommandBytes, MaxRecordBytes)
	}
}
