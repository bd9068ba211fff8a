//go:build !linux

package proc

import "errors"

// AwaitExit is Linux only (pidfds); elsewhere it returns
// errors.ErrUnsupported at once and the caller's Wait blocks as usual.
func AwaitExit(pid int) error { return errors.ErrUnsupported }
