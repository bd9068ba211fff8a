// Package healthcheck is the vocabulary of health checks that more than one
// service reads: what a check's name may be (the gateway refuses a scan that
// names another, and health refuses a node's result that does), and what
// the built-in checks' parameters may be (the agent reads them, the gateway
// refuses a scan whose values the agent would not take).
package healthcheck

import "regexp"

// MaxNameBytes bounds a check's name (a built-in one, or a site check
// program's file name).
const MaxNameBytes = 64

// namePattern is a check's name: a letter or digit, then letters, digits,
// '_', '.' and '-'.
var namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

// ValidName reports whether name is a check's name: at most MaxNameBytes
// of namePattern.
func ValidName(name string) bool {
	return len(name) <= MaxNameBytes && namePattern.MatchString(name)
}
