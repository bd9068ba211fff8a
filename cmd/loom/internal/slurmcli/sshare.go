package slurmcli

import (
	"context"
	"fmt"
	"math"
	"strings"

	"github.com/loom-ml/loom/libs/paging"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

var sshareOptions = []optDef{
	{long: []string{"accounts"}, short: 'A', arg: requiredArg},
	{long: []string{"all"}, short: 'a', arg: noArg},
	{long: []string{"clusters", "cluster"}, short: 'M', arg: requiredArg},
	{long: []string{"help"}, arg: noArg},
	{long: []string{"long"}, short: 'l', arg: noArg},
	{long: []string{"noheader"}, short: 'n', arg: noArg},
	{long: []string{"parsable"}, short: 'p', arg: noArg},
	{long: []string{"parsable2"}, short: 'P', arg: noArg},
	{long: []string{"users"}, short: 'u', arg: requiredArg},
	{long: []string{"usage"}, arg: noArg},
	{long: []string{"verbose"}, short: 'v', arg: noArg},
	{long: []string{"version"}, short: 'V', arg: noArg},
}

// sshareColumns are sshare's default columns: header and width, negative
// for a left-aligned value (sacctCell's rule; sshare right-aligns every
// header, Account's too: fieldsOut.rightHeaders).
var sshareColumns = []struct {
	header string
	width  int
}{
	{"Account", -20}, {"User", 10}, {"RawShares", 10}, {"NormShares", 11},
	{"RawUsage", 11}, {"EffectvUsage", 13}, {"FairShare", 10},
}

// sshare is the sshare command: the cluster's fair-share standing, as its
// scheduler computes priorities from it. The shares are divided down the
// account tree by RawShares (sacctmgr Fairshare=) among the accounts and
// users with jobs or usage; usage is GPU-seconds (CPU-seconds for jobs
// without GPUs), decayed.
func (c *cmd) sshare(ctx context.Context, args []string) error {
	p := &optParser{prog: "sshare", defs: sshareOptions}
	opts, rest, err := p.parse(args)
	if err != nil {
		return usage("sshare", err)
	}
	var accounts, users []string
	all, noHeader, parsable := false, false, 0
	clusterLine := false // -M: "CLUSTER: NAME" before the table, -n or not (as Slurm's sshare)
	for _, o := range opts {
		switch o.key {
		case "help", "usage":
			fmt.Fprint(c.stdout, sshareUsage)
			return nil
		case "version":
			return c.printVersion()
		case "accounts":
			accounts = splitList(o.value)
		case "all":
			all = true
		case "clusters":
			if c.env.Cluster, err = c.oneCluster(o.value); err != nil {
				return err
			}
			clusterLine = true
		case "long":
			return c.errorf("the long format (-l: LevelFS, GrpTRESMins, TRESRunMins) is not reported by Loom; use sshare without -l")
		case "noheader":
			noHeader = true
		case "parsable":
			parsable = 1
		case "parsable2":
			parsable = 2
		case "users":
			users = splitList(o.value)
		}
	}
	if len(rest) > 0 {
		return c.errorf("Unrecognized option: %s", rest[0])
	}
	cluster, err := c.clusterName(ctx)
	if err != nil {
		return err
	}
	var shares []*loomv1.Share
	err = paging.Each(func(token string) (string, error) {
		cctx, cancel := c.call(ctx)
		defer cancel()
		resp, err := c.slurmClient().ListShares(cctx, &loomv1.ListSharesRequest{Cluster: cluster, PageToken: token})
		shares = append(shares, resp.GetShares()...)
		return resp.GetNextPageToken(), err
	})
	if err != nil {
		return c.rpcError("sshare", err)
	}
	// Without -a or -u a user sees the accounts and their own rows, as
	// Slurm's sshare shows the caller's associations.
	if !all && len(users) == 0 {
		users = []string{c.env.User}
	}
	wantAcct, wantUser := newStringSet(accounts), newStringSet(users)
	// The root row, from the scheduler's own (a scheduler that sends none
	// sends only top accounts, whose usage adds up to the cluster's).
	var total float64
	if len(shares) > 0 && shares[0].GetAccount() == "root" && shares[0].GetUser() == "" && shares[0].GetParentAccount() == "" {
		total, shares = shares[0].GetRawUsage(), shares[1:]
	} else {
		for _, s := range shares {
			if s.GetUser() == "" {
				total += s.GetRawUsage()
			}
		}
	}
	// Each level of the account tree one space further in, as Slurm's
	// sshare: an account's row at its depth, its users' one deeper. The
	// rows come depth first, so an account's parent is always met first.
	depth := map[string]int{"root": 0}
	var rows [][]string
	rows = append(rows, []string{"root", "", "", "0.000000", usage64(total), "1.000000", ""})
	for _, s := range shares {
		account := s.GetAccount()
		if s.GetUser() == "" {
			depth[account] = min(depth[s.GetParentAccount()]+1, 64)
		}
		if len(accounts) > 0 && !wantAcct[account] {
			continue
		}
		d, ok := depth[account]
		if !ok {
			d = 1 // a user row without its account's: a top account's
		}
		indent := strings.Repeat(" ", d)
		if account == "" {
			account = "(null)"
		}
		if s.GetUser() == "" {
			rows = append(rows, []string{indent + account, "", rawShares(s), fmt.Sprintf("%.6f", s.GetNormShares()), usage64(s.GetRawUsage()),
				fmt.Sprintf("%.6f", s.GetEffectiveUsage()), ""})
			continue
		}
		if !all && !wantUser[s.GetUser()] {
			continue
		}
		rows = append(rows, []string{indent + " " + account, s.GetUser(), rawShares(s), fmt.Sprintf("%.6f", s.GetNormShares()), usage64(s.GetRawUsage()),
			fmt.Sprintf("%.6f", s.GetEffectiveUsage()), fmt.Sprintf("%.6f", s.GetFairShare())})
	}
	names, widths := make([]string, len(sshareColumns)), make([]int, len(sshareColumns))
	for i, col := range sshareColumns {
		names[i], widths[i] = col.header, col.width
	}
	var b strings.Builder
	if clusterLine {
		b.WriteString(c.clusterLine())
	}
	fieldsOut{parsable: parsable, delim: "|", noHeader: noHeader, rightHeaders: true}.writeFields(&b, names, widths, rows)
	fmt.Fprint(c.stdout, b.String())
	return nil
}

// rawShares is a row's RawShares: its Fairshare, 1 from a scheduler that
// does not say.
func rawShares(s *loomv1.Share) string { return fmt.Sprint(max(s.GetRawShares(), 1)) }

// usage64 is a usage as sshare prints it: whole units.
func usage64(v float64) string { return fmt.Sprintf("%d", int64(math.Round(v))) }

const sshareUsage = `Usage:  sshare [OPTION]
  Valid OPTIONs are:
    -a or --all            list all users
    -A or --accounts=      display specific accounts (comma separated list)
    -M or --clusters=name  cluster to issue commands to (overrides LOOM_CLUSTER)
    -n or --noheader       omit header from output
    -p or --parsable       '|' delimited output with a trailing '|'
    -P or --parsable2      '|' delimited output without a trailing '|'
    -u or --users=         display specific users (comma separated list)
    -V or --version        display tool version number
          --help           display this usage description
          --usage          display this usage description
`
