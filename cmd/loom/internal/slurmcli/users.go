package slurmcli

import (
	osuser "os/user"
	"strings"

	"github.com/loom-ml/loom/libs/auth"
)

// resolveUsers resolves a -u/--user list as Slurm's commands do: each item
// is a user name or a numeric uid, the uid of an OS account here (squeue
// -u $(id -u)). Slurm looks every name up in the account database; Loom's
// users need not be OS accounts, so a name is invalid only when it cannot
// be a Loom user at all (auth.CheckUserName, the grammar the gateway holds
// every user name to), and an unknown but well-formed name just matches no
// job. invalid keeps the items as written, in order.
func resolveUsers(items []string) (valid, invalid []string) {
	for _, u := range items {
		if u != "" && strings.Trim(u, "0123456789") == "" {
			if acct, err := osuser.LookupId(u); err == nil && auth.CheckUserName(acct.Username) == nil {
				valid = append(valid, acct.Username)
				continue
			}
			invalid = append(invalid, u)
			continue
		}
		if auth.CheckUserName(u) != nil {
			invalid = append(invalid, u)
			continue
		}
		valid = append(valid, u)
	}
	return valid, invalid
}

// filterUsers is resolveUsers for squeue and sprio: like Slurm 22.05's,
// they report each invalid user ("Invalid user: X" and an empty line) and
// go on without it; when every user given is invalid, no job matches
// (a non-nil empty list, never "all users").
func (c *cmd) filterUsers(items []string) []string {
	if items == nil {
		return nil
	}
	valid, invalid := resolveUsers(items)
	for _, u := range invalid {
		c.complainf("Invalid user: %s\n", u)
	}
	if valid == nil {
		valid = []string{}
	}
	return valid
}
