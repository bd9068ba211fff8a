package auth

import (
	"fmt"
	"regexp"
)

// MaxUserNameBytes is the longest OS account name Loom accepts (Linux's
// useradd limit is 32).
const MaxUserNameBytes = 32

// userNamePattern is the portable subset of OS account names that useradd
// accepts by default (NAME_REGEX): a lower-case letter or underscore, then
// lower-case letters, digits, underscores and dashes. A user's jobs run as
// the account of that name, so a name that could not be one (an e-mail
// address, "../x", a name with spaces) is refused where it enters.
var userNamePattern = regexp.MustCompile(`^[a-z_][a-z0-9_-]*$`)

// CheckUserName returns an error saying what is wrong when name cannot be
// an OS account name (see userNamePattern, at most MaxUserNameBytes).
func CheckUserName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("is required")
	case len(name) > MaxUserNameBytes:
		return fmt.Errorf("%d bytes, longer than the limit of %d for an OS account name", len(name), MaxUserNameBytes)
	case !userNamePattern.MatchString(name):
		return fmt.Errorf("%q is not a valid OS account name (want a lower-case letter or _, then lower-case letters, digits, _ or -)", name)
	}
	return nil
}
