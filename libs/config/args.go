package config

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// UsageError is a command line that did not parse. Err is the flag
// package's error (flag.ErrHelp for -h and -help); Usage is what the flag
// package wrote about it: the error, then the flag list.
type UsageError struct {
	Err   error
	Usage string
}

// Error is "flags: " and the flag package's error.
func (e *UsageError) Error() string { return "flags: " + e.Err.Error() }

// Unwrap returns Err, so that errors.Is(err, flag.ErrHelp) tells -help.
func (e *UsageError) Unwrap() error { return e.Err }

// ParseArgs parses a service's command line (args, without the program
// name) with the flags register adds to a flag set named name, into a
// fresh C, and returns it; the flags' defaults come from their LOOM_*
// variables as register reads them. A command line that does not parse,
// -help included, is a *UsageError, and nothing is written anywhere: the
// caller decides whether the usage is shown (Exit shows it).
func ParseArgs[C any](name string, args []string, register func(*C, *flag.FlagSet)) (C, error) {
	var cfg C
	var usage strings.Builder
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(&usage)
	register(&cfg, fs)
	if err := fs.Parse(args); err != nil {
		return cfg, &UsageError{Err: err, Usage: usage.String()}
	}
	if fs.NArg() > 0 {
		err := fmt.Errorf("unexpected arguments %q: %s takes only flags", fs.Args(), name)
		fmt.Fprintln(&usage, err)
		fs.Usage()
		return cfg, &UsageError{Err: err, Usage: usage.String()}
	}
	return cfg, nil
}

// Exit is the exit status of a service command whose run ended with err,
// after writing to stderr what the user is told, as the services' commands
// always did (with flag.ExitOnError): for a *UsageError its usage, then 0
// for -help and 2 otherwise; for another error "name: err" and 1; 0 for
// nil.
func Exit(name string, err error, stderr io.Writer) int {
	var u *UsageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &u):
		_, _ = io.WriteString(stderr, u.Usage)
		if errors.Is(u.Err, flag.ErrHelp) {
			return 0
		}
		return 2
	default:
		fmt.Fprintln(stderr, name+":", err)
		return 1
	}
}

// Main is a service binary's main: it runs runArgs with the process's
// command line until SIGINT or SIGTERM ends its context, then exits with
// Exit's status.
func Main(name string, runArgs func(ctx context.Context, args []string) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := runArgs(ctx, os.Args[1:])
	stop()
	os.Exit(Exit(name, err, os.Stderr))
}
