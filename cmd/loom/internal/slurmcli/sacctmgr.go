package slurmcli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/loom-ml/loom/libs/paging"
	"github.com/loom-ml/loom/libs/slurmspec"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// sacctmgr over the gateway's AccountService: accounts and associations
// belong to the Loom project (LOOM_PROJECT), which plays Slurm's cluster
// in the accounting database, so the Cluster column shows the project.
// Changes are committed at once: -i is accepted and there is no
// confirmation prompt.

var sacctmgrOptions = []optDef{
	{long: []string{"associations"}, short: 's', arg: noArg},
	{long: []string{"help"}, short: 'h', arg: noArg},
	{long: []string{"immediate"}, short: 'i', arg: noArg},
	{long: []string{"noheader"}, short: 'n', arg: noArg},
	{long: []string{"parsable"}, short: 'p', arg: noArg},
	{long: []string{"parsable2"}, short: 'P', arg: noArg},
	{long: []string{"quiet"}, short: 'Q', arg: noArg},
	{long: []string{"readonly"}, short: 'r', arg: noArg},
	{long: []string{"verbose"}, short: 'v', arg: noArg},
	{long: []string{"version"}, short: 'V', arg: noArg},
}

const sacctmgrUsage = `sacctmgr [<OPTION>] [<COMMAND>]
    Valid <OPTION> values are:
     -h or --help: equivalent to "help" command
     -i or --immediate: commit changes immediately (Loom always does)
     -n or --noheader: no header will be added to the beginning of output
     -p or --parsable: output will be '|' delimited with a '|' at the end
     -P or --parsable2: output will be '|' delimited without a '|' at the end
     -Q or --quiet: equivalent to "quiet" command
     -V or --version: equivalent to "version" command

  Valid <COMMAND> values are:
     add <ENTITY> <SPECS>     add entity
     list <ENTITY> [<SPECS>]  display info of identified entity (also show)
     modify <ENTITY> where <SPECS> set <SPECS>  modify entity
     delete <ENTITY> where <SPECS>  delete the specified entities

  <ENTITY> may be "account", "association" or "user".

  show assoc [tree] [user=U] [account=A] [format=...]
  add account NAME[,NAME] [Description=] [Organization=] [Parent=] [Fairshare=] [GrpTRES=]
  add user NAME[,NAME] Account=A[,A] [DefaultAccount=] [MaxJobs=] [MaxSubmitJobs=] [Fairshare=] [QOS=] [DefaultQOS=]
                                     [GrpTRES=] [MaxTRESPerJob=] [MaxWall=]
  modify user where name=NAME [account=A] set [MaxJobs=] [MaxSubmitJobs=] [Fairshare=] [DefaultAccount=]
                                             [GrpTRES=] [MaxTRESPerJob=] [MaxWall=]
  modify account where name=NAME[,NAME] set [Description=] [Organization=] [Parent=] [Fairshare=] [GrpTRES=]
  (TRES: cpu=N,mem=N[M|G|T],node=N,gres/gpu=N; N=-1 clears one, 0 lets none; MaxWall=[D-]HH:MM:SS, 0 (no job runs) or -1)
  delete account NAME[,NAME]
  delete user NAME[,NAME] [Account=A[,A]]
                                             [QOS=a,b | QOS+=a | QOS-=a] [DefaultQOS=]
  show account [NAME] | show user [NAME] | show assoc [user=] [account=]
`

// msgPolicyViolation starts the gateway's refusal of a submission past an
// association's MaxSubmitJobs: Slurm's reason (ESLURM_ACCOUNTING_POLICY).
const msgPolicyViolation = "Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)"

// msgInvalidQOS starts the gateway's refusal of a submission asking for a
// QOS the user may not use (job.qos): Slurm's reason (ESLURM_INVALID_QOS).
const msgInvalidQOS = "Invalid qos specification"

// policyViolation prints Slurm's refusal line as Slurm does, then the
// limit the gateway names (which limit, its value, what was counted) on a
// second line, so scripts matching Slurm's line still match.
func policyViolation(c *cmd, what, msg string) *Error {
	return slurmRefusal(c, what, msgPolicyViolation, strings.TrimSuffix(msg, ": resource exhausted"))
}

// slurmRefusal prints "what: reason", Slurm's line, then the rest of the
// gateway's message msg (which starts with reason) on a second line.
func slurmRefusal(c *cmd, what, reason, msg string) *Error {
	detail := strings.TrimPrefix(strings.TrimPrefix(msg, reason), ": ")
	text := c.errorf("%s: %s", what, reason).Text
	if detail != "" {
		text += "\n" + c.errorf("%s", detail).Text
	}
	return &Error{Text: text, Code: 1}
}

// sacctmgrOut is how show prints: the table's header and the delimiter mode.
type sacctmgrOut struct {
	noHeader bool
	parsable int // 1: -p (trailing '|'), 2: -P
	quiet    bool
	// format is show's format= ("Account,User,MaxJobs%12"); "": the
	// entity's default columns.
	format string
	// tree is show assoc's tree: each account one space further in than
	// its parent, its users one more, in a left-justified column.
	tree bool
}

// sacctmgrField is one column of a show: its Slurm name and width.
type sacctmgrField struct {
	name  string
	width int
}

// Columns as sacctmgr 22.05 names and sizes them.
var (
	sacctmgrAssocFields = []sacctmgrField{{"Cluster", 10}, {"Account", 10}, {"User", 10}, {"Partition", 10},
		{"Share", 9}, {"Priority", 10}, {"GrpJobs", 7}, {"GrpTRES", 13}, {"GrpSubmit", 9}, {"GrpWall", 11},
		{"GrpTRESMins", 13}, {"MaxJobs", 7}, {"MaxTRES", 13}, {"MaxTRESPerNode", 14}, {"MaxSubmit", 9},
		{"MaxWall", 11}, {"MaxTRESMins", 13}, {"QOS", 20}, {"Def QOS", 9}, {"GrpTRESRunMins", 13}}
	sacctmgrUserFields    = []sacctmgrField{{"User", 10}, {"Def Acct", 10}, {"Admin", 9}}
	sacctmgrAccountFields = []sacctmgrField{{"Account", 10}, {"Descr", 20}, {"Org", 20}}
)

// sacctmgrAliases are the other names format= takes for a column
// (lower case, without spaces); a column's own name is always taken.
var sacctmgrAliases = map[string]string{
	"fairshare": "share", "shares": "share", "maxsubmitjobs": "maxsubmit", "grpsubmitjobs": "grpsubmit",
	"defaultqos": "defqos", "grptresrunmin": "grptresrunmins", "defaultaccount": "defacct",
	"adminlevel": "admin", "description": "descr", "organization": "org", "name": "",
}

// selectFields applies a format= list to the default columns: the columns
// it names, in its order, each with its "%W" width (negative:
// left-justified); pick maps each to its index in a default row.
func selectFields(all []sacctmgrField, spec string, entity string) (fields []sacctmgrField, pick []int, err error) {
	index := map[string]int{}
	for i, f := range all {
		index[strings.ToLower(strings.ReplaceAll(f.name, " ", ""))] = i
	}
	for _, item := range splitList(spec) {
		name, width, hasWidth := strings.Cut(item, "%")
		key := strings.ToLower(strings.ReplaceAll(name, " ", ""))
		if a, ok := sacctmgrAliases[key]; ok {
			key = a
			if key == "" {
				key = entity // name= is the entity's own column
			}
		}
		i, ok := index[key]
		if !ok {
			return nil, nil, sacctmgrFail("Unknown field '%s'", name)
		}
		f := all[i]
		if hasWidth {
			w, err := strconv.Atoi(width)
			if err != nil || w == 0 || w > maxFieldWidth || w < -maxFieldWidth {
				return nil, nil, sacctmgrFail("Unknown field '%s'", item)
			}
			f.width = w
		}
		fields, pick = append(fields, f), append(pick, i)
	}
	if len(fields) == 0 {
		return nil, nil, sacctmgrFail("Unknown field '%s'", spec)
	}
	return fields, pick, nil
}

// table prints rows (each a value per default field) as print_fields does,
// the columns of format= when set.
func (o sacctmgrOut) table(c *cmd, fields []sacctmgrField, rows [][]string, entity string) error {
	if o.format != "" {
		sel, pick, err := selectFields(fields, o.format, entity)
		if err != nil {
			return err
		}
		projected := make([][]string, len(rows))
		for r, row := range rows {
			projected[r] = make([]string, len(pick))
			for j, i := range pick {
				projected[r][j] = row[i]
			}
		}
		fields, rows = sel, projected
	}
	names, widths := make([]string, len(fields)), make([]int, len(fields))
	for i, f := range fields {
		names[i], widths[i] = f.name, f.width
	}
	var b strings.Builder
	fieldsOut{parsable: o.parsable, delim: "|", noHeader: o.noHeader}.writeFields(&b, names, widths, rows)
	fmt.Fprint(c.stdout, b.String())
	return nil
}

// sacctmgrFail is sacctmgr's refusal: its message as is (Slurm's start
// with a space), exit status 1.
func sacctmgrFail(format string, args ...any) *Error {
	return &Error{Text: fmt.Sprintf(format, args...), Code: 1}
}

// word reports whether s abbreviates full (case-insensitive), at least min
// letters long, as sacctmgr matches commands and entities.
func word(s, full string, min int) bool {
	return len(s) >= min && len(s) <= len(full) && strings.EqualFold(s, full[:len(s)])
}

// sacctmgrSpec is one "Key=Value" of a command line, or a bare word.
type sacctmgrSpec struct {
	key, value string
	bare       bool
	raw        string
}

func parseSacctmgrSpecs(args []string) []sacctmgrSpec {
	out := make([]sacctmgrSpec, 0, len(args))
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok {
			out = append(out, sacctmgrSpec{value: a, bare: true, raw: a})
			continue
		}
		// "MaxJobs+=1" style operators are not supported: the key keeps them
		// and is refused as unknown.
		out = append(out, sacctmgrSpec{key: strings.ToLower(k), value: v, raw: a})
	}
	return out
}

func (c *cmd) sacctmgr(ctx context.Context, args []string) error {
	p := &optParser{prog: "sacctmgr", defs: sacctmgrOptions}
	opts, rest, err := p.parse(args)
	if err != nil {
		return usage("sacctmgr", err)
	}
	var out sacctmgrOut
	withAssoc := false
	for _, o := range opts {
		switch o.key {
		case "help":
			fmt.Fprint(c.stdout, sacctmgrUsage)
			return nil
		case "version":
			return c.printVersion()
		case "noheader":
			out.noHeader = true
		case "parsable":
			out.parsable = 1
		case "parsable2":
			out.parsable = 2
		case "quiet":
			out.quiet = true
		case "associations":
			withAssoc = true
		}
	}
	if len(rest) == 0 {
		return sacctmgrFail("sacctmgr: error: no command given; Loom's sacctmgr has no interactive mode (see sacctmgr --help)")
	}
	verb, rest := rest[0], rest[1:]
	switch {
	case word(verb, "help", 2):
		fmt.Fprint(c.stdout, sacctmgrUsage)
		return nil
	case word(verb, "version", 4):
		return c.printVersion()
	case word(verb, "show", 3), word(verb, "list", 3):
		return c.sacctmgrShow(ctx, rest, out, withAssoc)
	case word(verb, "add", 3), word(verb, "create", 3):
		return c.sacctmgrAdd(ctx, rest, out)
	case word(verb, "modify", 1), word(verb, "update", 1):
		return c.sacctmgrModify(ctx, rest, out)
	case word(verb, "delete", 3), word(verb, "remove", 3):
		return c.sacctmgrDelete(ctx, rest, out)
	}
	return sacctmgrFail("invalid keyword: %s", verb)
}

// entity names what a command acts on: "account", "association" or "user".
func sacctmgrEntity(s string) string {
	switch {
	case word(s, "accounts", 3):
		return "account"
	case word(s, "associations", 3):
		return "association"
	case word(s, "users", 1):
		return "user"
	}
	return ""
}

func (c *cmd) accountsClient() loomv1.AccountServiceClient {
	return loomv1.NewAccountServiceClient(c.env.Conn)
}

// listAccounts reads every account of the project (root included).
func (c *cmd) listAccounts(ctx context.Context) ([]*loomv1.Account, error) {
	var out []*loomv1.Account
	err := paging.Each(func(token string) (string, error) {
		cctx, cancel := c.call(ctx)
		defer cancel()
		resp, err := c.accountsClient().ListAccounts(cctx, &loomv1.ListAccountsRequest{Parent: c.projectName(), PageToken: token, PageSize: paging.MaxSize})
		out = append(out, resp.GetAccounts()...)
		return resp.GetNextPageToken(), err
	})
	if err != nil {
		return nil, c.rpcError("listing accounts", err)
	}
	return out, nil
}

// listAssociations reads the project's associations, one user's or one
// account's when set.
func (c *cmd) listAssociations(ctx context.Context, user, account string) ([]*loomv1.Association, error) {
	out, _, err := c.listAssociationsOpen(ctx, user, account)
	return out, err
}

// listAssociationsOpen is listAssociations, with the QOS open to every
// member of the project.
func (c *cmd) listAssociationsOpen(ctx context.Context, user, account string) ([]*loomv1.Association, []string, error) {
	var out []*loomv1.Association
	var open []string
	err := paging.Each(func(token string) (string, error) {
		cctx, cancel := c.call(ctx)
		defer cancel()
		resp, err := c.accountsClient().ListAssociations(cctx, &loomv1.ListAssociationsRequest{Parent: c.projectName(),
			User: user, Account: account, PageToken: token, PageSize: paging.MaxSize})
		out = append(out, resp.GetAssociations()...)
		open = resp.GetOpenQos()
		return resp.GetNextPageToken(), err
	})
	if err != nil {
		return nil, nil, c.rpcError("listing associations", err)
	}
	return out, open, nil
}

func (c *cmd) sacctmgrShow(ctx context.Context, args []string, out sacctmgrOut, withAssoc bool) error {
	if len(args) == 0 {
		return sacctmgrFail("No valid entity in list command\nInput line must include \"Account\", \"Association\", or \"User\"")
	}
	entity := sacctmgrEntity(args[0])
	if entity == "" {
		return sacctmgrFail("No valid entity in list command\nInput line must include \"Account\", \"Association\", or \"User\"")
	}
	var names, users, accounts []string
	for _, s := range parseSacctmgrSpecs(args[1:]) {
		switch {
		case s.bare && strings.EqualFold(s.value, "where"):
		case s.bare && strings.EqualFold(s.value, "withassoc"):
			withAssoc = true
		case s.bare && strings.EqualFold(s.value, "tree"):
			out.tree = true
		case s.bare:
			names = append(names, splitList(s.value)...)
		case s.key == "name" || s.key == "names":
			names = append(names, splitList(s.value)...)
		case word(s.key, "users", 1):
			users = append(users, splitList(s.value)...)
		case word(s.key, "accounts", 3) || s.key == "acct":
			accounts = append(accounts, splitList(s.value)...)
		case word(s.key, "format", 3):
			out.format = s.value
		case word(s.key, "clusters", 1):
			// One project: the cluster condition is not a filter here.
		default:
			return sacctmgrFail(" Unknown condition: %s\n Use keyword 'set' to modify value", s.raw)
		}
	}
	switch entity {
	case "account":
		accounts = append(accounts, names...)
		if withAssoc {
			return c.sacctmgrShowAssoc(ctx, users, accounts, out)
		}
		return c.sacctmgrShowAccounts(ctx, accounts, out)
	case "user":
		users = append(users, names...)
		if withAssoc {
			return c.sacctmgrShowAssoc(ctx, users, accounts, out)
		}
		return c.sacctmgrShowUsers(ctx, users, out)
	}
	return c.sacctmgrShowAssoc(ctx, users, accounts, out)
}

func inList(list []string, v string) bool {
	if len(list) == 0 {
		return true
	}
	for _, x := range list {
		if strings.EqualFold(x, v) {
			return true
		}
	}
	return false
}

func (c *cmd) sacctmgrShowAccounts(ctx context.Context, names []string, out sacctmgrOut) error {
	accts, err := c.listAccounts(ctx)
	if err != nil {
		return err
	}
	var rows [][]string
	for _, a := range sortedAccounts(accts) {
		if id := shortName(a.GetName()); inList(names, id) {
			rows = append(rows, []string{id, a.GetDescription(), a.GetOrganization()})
		}
	}
	return out.table(c, sacctmgrAccountFields, rows, "account")
}

// sortedAccounts orders accounts by id.
func sortedAccounts(accts []*loomv1.Account) []*loomv1.Account {
	out := append([]*loomv1.Account(nil), accts...)
	sort.Slice(out, func(i, j int) bool { return shortName(out[i].GetName()) < shortName(out[j].GetName()) })
	return out
}

func (c *cmd) sacctmgrShowUsers(ctx context.Context, names []string, out sacctmgrOut) error {
	assocs, err := c.listAssociations(ctx, "", "")
	if err != nil {
		return err
	}
	def := map[string]string{}
	var users []string
	for _, a := range assocs {
		if _, seen := def[a.GetUser()]; !seen {
			users = append(users, a.GetUser())
			def[a.GetUser()] = ""
		}
		if a.GetDefaultAccount() {
			def[a.GetUser()] = a.GetAccount()
		}
	}
	sort.Strings(users)
	var rows [][]string
	for _, u := range users {
		if inList(names, u) {
			// Loom's administrators are its roles (loom auth), not
			// sacctmgr's AdminLevel: every user reads None.
			rows = append(rows, []string{u, def[u], "None"})
		}
	}
	return out.table(c, sacctmgrUserFields, rows, "user")
}

// sacctmgrShowAssoc prints the association tree as sacctmgr does: each
// account's own row (no user), its users' rows, then its sub-accounts,
// depth first from root. A user filter shows only users' rows.
func (c *cmd) sacctmgrShowAssoc(ctx context.Context, users, accounts []string, out sacctmgrOut) error {
	accts, err := c.listAccounts(ctx)
	if err != nil {
		return err
	}
	assocs, open, err := c.listAssociationsOpen(ctx, "", "")
	if err != nil {
		return err
	}
	children := map[string][]*loomv1.Account{}
	known := map[string]bool{}
	for _, a := range sortedAccounts(accts) {
		id := shortName(a.GetName())
		known[id] = true
		if id != "root" {
			parent := a.GetParentAccount()
			if parent == "" {
				parent = "root"
			}
			children[parent] = append(children[parent], a)
		}
	}
	byAccount := map[string][]*loomv1.Association{}
	for _, a := range assocs {
		byAccount[a.GetAccount()] = append(byAccount[a.GetAccount()], a)
	}
	num := func(n int32) string {
		if n <= 0 {
			return ""
		}
		return strconv.Itoa(int(n))
	}
	// QOS is what a job charged there may ask for: the QOS open to every
	// member, and for a user's row those the association grants.
	row := func(account, user string, share int32, maxJobs, maxSubmit int32, a *loomv1.Association, grp *loomv1.Tres) []string {
		qos := slices.Clone(open)
		qos = append(qos, a.GetQos()...)
		slices.Sort(qos)
		var wall *int32 // an account's row (a nil) has none
		if a != nil {
			wall = a.MaxWallMinutes
		}
		return []string{c.env.Project, account, user, "", strconv.Itoa(int(max(share, 1))), "", "", slurmspec.TRESFromProto(grp).String(), "", "", "", num(maxJobs),
			slurmspec.TRESFromProto(a.GetMaxTresPerJob()).String(), "", num(maxSubmit), maxWallString(wall, ""), "",
			strings.Join(slices.Compact(qos), ","), a.GetDefaultQos(), ""}
	}
	indent := func(depth int) string {
		if !out.tree {
			return ""
		}
		return strings.Repeat(" ", depth)
	}
	var rows [][]string
	var walk func(id string, share int32, grp *loomv1.Tres, depth int)
	seen := map[string]bool{}
	walk = func(id string, share int32, grp *loomv1.Tres, depth int) {
		if seen[id] {
			return // a parent loop in stored data must not hang the listing
		}
		seen[id] = true
		if inList(accounts, id) {
			if len(users) == 0 {
				rows = append(rows, row(indent(depth)+id, "", share, 0, 0, nil, grp))
			}
			us := byAccount[id]
			sort.Slice(us, func(i, j int) bool { return us[i].GetUser() < us[j].GetUser() })
			for _, a := range us {
				if inList(users, a.GetUser()) {
					rows = append(rows, row(indent(depth+1)+id, a.GetUser(), a.GetFairshare(), a.GetMaxJobs(), a.GetMaxSubmitJobs(), a, a.GetGrpTres()))
				}
			}
		}
		for _, ch := range children[id] {
			walk(shortName(ch.GetName()), ch.GetFairshare(), ch.GetGrpTres(), min(depth+1, 64))
		}
	}
	walk("root", 1, nil, 0)
	// Accounts whose parent is unknown still show, after the tree.
	for _, a := range sortedAccounts(accts) {
		walk(shortName(a.GetName()), a.GetFairshare(), a.GetGrpTres(), 1)
	}
	fields := sacctmgrAssocFields
	if out.tree {
		fields = slices.Clone(fields)
		fields[1].width = -20 // Account, as Slurm's tree
	}
	return out.table(c, fields, rows, "user")
}

// sacctmgrInt reads a limit: a count, or -1 for none (stored as 0).
func sacctmgrInt(title, v string) (int32, error) {
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil || n < -1 {
		return 0, sacctmgrFail(" Bad %s value: %s", title, v)
	}
	return int32(max(n, 0)), nil
}

// sacctmgrTRES reads a TRES limit (GrpTRES=, MaxTRESPerJob=) with
// slurmspec's grammar; the refusal names the option and why.
func sacctmgrTRES(title, v string) ([]slurmspec.TRESSetting, error) {
	t, err := slurmspec.ParseTRES(v)
	if err != nil {
		return nil, sacctmgrFail(" Bad %s value: %v", title, err)
	}
	return t, nil
}

// tresSettings writes settings as given, normalized: "gres/gpu=64,cpu=-1".
func tresSettings(settings []slurmspec.TRESSetting) string {
	out := make([]string, len(settings))
	for i, s := range settings {
		v := strconv.FormatInt(s.Value, 10)
		if s.Name == "mem" && s.Value > 0 {
			v = slurmspec.FormatMemMB(s.Value)
		}
		out[i] = s.Name + "=" + v
	}
	return strings.Join(out, ",")
}

// maxWallString is MaxWall as sacctmgr prints it (Slurm's mins2time_str:
// "[D-]HH:MM:SS", 0 as "00:00:00"), none for no limit (nil or negative).
func maxWallString(minutes *int32, none string) string {
	if minutes == nil || *minutes < 0 {
		return none
	}
	return formatDuration(int64(*minutes) * 60)
}

// assocSettings are the association values a command line sets.
type assocSettings struct {
	maxJobs, maxSubmit, fairshare *int32
	defaultAccount                string
	// grpTRES and maxTRES are GrpTRES= and MaxTRESPerJob= (each TRES
	// named set, -1 clearing it, the others kept); maxWall MaxWall= in
	// minutes (-1: cleared; 0 is a limit, as Slurm's).
	grpTRES, maxTRES []slurmspec.TRESSetting
	maxWall          *int32
	// qos is QOS=a,b (replaces the grants, qosSet), qosAdd QOS+=a and
	// qosDel QOS-=a; defaultQOS DefaultQOS=a (qosDefSet; "" or -1 unsets it).
	qos, qosAdd, qosDel []string
	qosSet, qosDefSet   bool
	defaultQOS          string
}

// changes reports whether s changes an association's values (beyond which
// account is the user's default).
func (s *assocSettings) changes() bool {
	return s.maxJobs != nil || s.maxSubmit != nil || s.fairshare != nil || s.qosSet || len(s.qosAdd) > 0 ||
		len(s.qosDel) > 0 || s.qosDefSet || len(s.grpTRES) > 0 || len(s.maxTRES) > 0 || s.maxWall != nil
}

// parse reads one association setting; ok is false for a key it does not know.
func (s *assocSettings) parse(sp sacctmgrSpec) (bool, error) {
	set := func(dst **int32, title string) error {
		n, err := sacctmgrInt(title, sp.value)
		if err != nil {
			return err
		}
		*dst = &n
		return nil
	}
	switch {
	case sp.key == "maxjobs":
		return true, set(&s.maxJobs, "MaxJobs")
	case sp.key == "maxsubmitjobs" || sp.key == "maxsubmit":
		return true, set(&s.maxSubmit, "MaxSubmitJobs")
	case sp.key == "fairshare" || sp.key == "share" || sp.key == "shares":
		return true, set(&s.fairshare, "Fairshare")
	case sp.key == "grptres":
		t, err := sacctmgrTRES("GrpTRES", sp.value)
		s.grpTRES = append(s.grpTRES, t...)
		return true, err
	case sp.key == "maxtres" || sp.key == "maxtresperjob" || sp.key == "maxtrespj":
		t, err := sacctmgrTRES("MaxTRESPerJob", sp.value)
		s.maxTRES = append(s.maxTRES, t...)
		return true, err
	case sp.key == "maxwall" || sp.key == "maxwalldurationperjob" || sp.key == "maxwalldurationpj":
		m, clear, err := slurmspec.ParseMaxWall(sp.value)
		if err != nil {
			return true, sacctmgrFail(" Bad MaxWall time format: %s: %v", sp.value, err)
		}
		if clear {
			m = -1
		}
		s.maxWall = &m
		return true, nil
	case sp.key == "defaultaccount" || sp.key == "defaccount" || sp.key == "defacct":
		s.defaultAccount = strings.ToLower(sp.value)
		return true, nil
	case sp.key == "qos" || sp.key == "qoslevel":
		s.qos, s.qosSet = splitList(strings.ToLower(sp.value)), true
		if sp.value == "" || sp.value == "''" || sp.value == "-1" {
			s.qos = nil
		}
		return true, nil
	case sp.key == "qos+" || sp.key == "qoslevel+":
		s.qosAdd = append(s.qosAdd, splitList(strings.ToLower(sp.value))...)
		return true, nil
	case sp.key == "qos-" || sp.key == "qoslevel-":
		s.qosDel = append(s.qosDel, splitList(strings.ToLower(sp.value))...)
		return true, nil
	case sp.key == "defaultqos" || sp.key == "defqos":
		s.defaultQOS, s.qosDefSet = strings.ToLower(sp.value), true
		if sp.value == "-1" || sp.value == "''" {
			s.defaultQOS = ""
		}
		return true, nil
	}
	return false, nil
}

// apply writes the settings into a.
func (s *assocSettings) apply(a *loomv1.Association) {
	if s.maxJobs != nil {
		a.MaxJobs = *s.maxJobs
	}
	if s.maxSubmit != nil {
		a.MaxSubmitJobs = *s.maxSubmit
	}
	if s.fairshare != nil {
		a.Fairshare = *s.fairshare
	}
	if len(s.grpTRES) > 0 {
		a.GrpTres = slurmspec.TRESFromProto(a.GetGrpTres()).With(s.grpTRES).Proto()
	}
	if len(s.maxTRES) > 0 {
		a.MaxTresPerJob = slurmspec.TRESFromProto(a.GetMaxTresPerJob()).With(s.maxTRES).Proto()
	}
	switch {
	case s.maxWall == nil:
	case *s.maxWall < 0:
		a.MaxWallMinutes = nil // -1: no limit
	default:
		a.MaxWallMinutes = proto.Int32(*s.maxWall) // 0 included: no job runs
	}
	if s.qosSet {
		a.Qos = slices.Clone(s.qos)
	}
	a.Qos = append(a.Qos, s.qosAdd...)
	a.Qos = slices.DeleteFunc(a.Qos, func(q string) bool { return slices.Contains(s.qosDel, q) })
	if s.qosDefSet {
		a.DefaultQos = s.defaultQOS
	}
}

// lines lists the settings as sacctmgr's summaries do.
func (s *assocSettings) lines() []string {
	var out []string
	if s.maxJobs != nil {
		out = append(out, fmt.Sprintf("  MaxJobs       = %d", *s.maxJobs))
	}
	if s.maxSubmit != nil {
		out = append(out, fmt.Sprintf("  MaxSubmitJobs = %d", *s.maxSubmit))
	}
	if s.fairshare != nil {
		out = append(out, fmt.Sprintf("  Fairshare     = %d", *s.fairshare))
	}
	if len(s.grpTRES) > 0 {
		out = append(out, "  GrpTRES       = "+tresSettings(s.grpTRES))
	}
	if len(s.maxTRES) > 0 {
		out = append(out, "  MaxTRESPerJob = "+tresSettings(s.maxTRES))
	}
	if s.maxWall != nil {
		out = append(out, "  MaxWall       = "+maxWallString(s.maxWall, "-1"))
	}
	switch {
	case s.qosSet:
		out = append(out, "  QOS           = "+strings.Join(s.qos, ","))
	case len(s.qosAdd) > 0:
		out = append(out, "  QOS          += "+strings.Join(s.qosAdd, ","))
	}
	if len(s.qosDel) > 0 {
		out = append(out, "  QOS          -= "+strings.Join(s.qosDel, ","))
	}
	if s.qosDefSet {
		out = append(out, "  Default QOS   = "+s.defaultQOS)
	}
	return out
}

func (c *cmd) sacctmgrAdd(ctx context.Context, args []string, out sacctmgrOut) error {
	if len(args) == 0 {
		return sacctmgrFail("No valid entity in add command\nInput line must include, \"User\", or \"Account\"")
	}
	switch sacctmgrEntity(args[0]) {
	case "account":
		return c.sacctmgrAddAccount(ctx, parseSacctmgrSpecs(args[1:]), out)
	case "user":
		return c.sacctmgrAddUser(ctx, parseSacctmgrSpecs(args[1:]), out)
	}
	return sacctmgrFail("No valid entity in add command\nInput line must include, \"User\", or \"Account\"")
}

func (c *cmd) sacctmgrAddAccount(ctx context.Context, specs []sacctmgrSpec, out sacctmgrOut) error {
	var names []string
	acct := &loomv1.Account{}
	for _, s := range specs {
		switch {
		case s.bare && strings.EqualFold(s.value, "where"):
		case s.bare || s.key == "name" || s.key == "names":
			names = append(names, splitList(strings.ToLower(s.value))...)
		case word(s.key, "description", 1):
			acct.Description = s.value
		case word(s.key, "organization", 1):
			acct.Organization = s.value
		case s.key == "parent":
			acct.ParentAccount = strings.ToLower(s.value)
		case s.key == "fairshare" || s.key == "share" || s.key == "shares":
			n, err := sacctmgrInt("Fairshare", s.value)
			if err != nil {
				return err
			}
			acct.Fairshare = n
		case s.key == "grptres":
			t, err := sacctmgrTRES("GrpTRES", s.value)
			if err != nil {
				return err
			}
			acct.GrpTres = slurmspec.TRESFromProto(acct.GetGrpTres()).With(t).Proto()
		case word(s.key, "clusters", 1):
		default:
			return sacctmgrFail(" Unknown option: %s\n Use keyword 'where' to modify condition", s.raw)
		}
	}
	if len(names) == 0 {
		return sacctmgrFail(" Need name of account to add.")
	}
	var added []*loomv1.Account
	for _, n := range names {
		a := &loomv1.Account{Name: n, Description: acct.GetDescription(), Organization: acct.GetOrganization(),
			ParentAccount: acct.GetParentAccount(), Fairshare: acct.GetFairshare(), GrpTres: acct.GetGrpTres()}
		var got *loomv1.Account
		err := c.retryChanged("adding account "+n, func(bool) error {
			cctx, cancel := c.call(ctx)
			defer cancel()
			var err error
			got, err = c.accountsClient().CreateAccount(cctx, &loomv1.CreateAccountRequest{Parent: c.projectName(), Account: a})
			if status.Code(err) == codes.AlreadyExists {
				got, err = nil, nil
			}
			return err
		})
		if err != nil {
			return err
		}
		if got != nil {
			added = append(added, got)
		}
	}
	if len(added) == 0 {
		fmt.Fprintln(c.stdout, " Nothing new added.")
		return &Error{Code: 1}
	}
	if out.quiet {
		return nil
	}
	var b strings.Builder
	b.WriteString(" Adding Account(s)\n")
	for _, a := range added {
		fmt.Fprintf(&b, "  %s\n", shortName(a.GetName()))
	}
	b.WriteString(" Settings\n")
	fmt.Fprintf(&b, "  Description     = %s\n", added[0].GetDescription())
	fmt.Fprintf(&b, "  Organization    = %s\n", added[0].GetOrganization())
	b.WriteString(" Associations\n")
	for _, a := range added {
		fmt.Fprintf(&b, "  A = %-10.10s C = %-10.10s\n", shortName(a.GetName()), c.env.Project)
	}
	b.WriteString(" Settings\n")
	fmt.Fprintf(&b, "  Parent        = %s\n", added[0].GetParentAccount())
	if t := slurmspec.TRESFromProto(added[0].GetGrpTres()).String(); t != "" {
		fmt.Fprintf(&b, "  GrpTRES       = %s\n", t)
	}
	fmt.Fprint(c.stdout, b.String())
	return nil
}

func (c *cmd) sacctmgrAddUser(ctx context.Context, specs []sacctmgrSpec, out sacctmgrOut) error {
	var names, accounts []string
	var set assocSettings
	for _, s := range specs {
		if ok, err := set.parse(s); err != nil {
			return err
		} else if ok {
			continue
		}
		switch {
		case s.bare && strings.EqualFold(s.value, "where"):
		case s.bare || s.key == "name" || s.key == "names":
			names = append(names, splitList(strings.ToLower(s.value))...)
		case word(s.key, "accounts", 3) || s.key == "acct":
			accounts = append(accounts, splitList(strings.ToLower(s.value))...)
		case word(s.key, "clusters", 1):
		case word(s.key, "partitions", 4):
			return sacctmgrFail(" Associations per partition are not supported by Loom: %s", s.raw)
		default:
			return sacctmgrFail(" Unknown option: %s\n Use keyword 'where' to modify condition", s.raw)
		}
	}
	if len(names) == 0 {
		return sacctmgrFail(" Need name of user to add.")
	}
	if set.defaultAccount != "" && !inList(accounts, set.defaultAccount) || len(accounts) == 0 && set.defaultAccount != "" {
		accounts = append(accounts, set.defaultAccount)
	}
	if len(accounts) == 0 {
		return sacctmgrFail(" Need a default account for these users to add.")
	}
	type added struct{ user, account string }
	var done []added
	defaults := map[string]string{}
	for _, u := range names {
		existing, err := c.listAssociations(ctx, u, "")
		if err != nil {
			return err
		}
		has := map[string]bool{}
		for _, a := range existing {
			has[a.GetAccount()] = true
			if a.GetDefaultAccount() {
				defaults[u] = a.GetAccount()
			}
		}
		for _, acct := range accounts {
			if has[acct] {
				continue
			}
			a := &loomv1.Association{Account: acct, User: u, DefaultAccount: acct == set.defaultAccount}
			set.apply(a)
			var got *loomv1.Association
			err := c.retryChanged(fmt.Sprintf("adding user %s to account %s", u, acct), func(again bool) error {
				if again {
					// Added meanwhile by another call: left as it is,
					// as an association that was there.
					if now, err := c.listAssociations(ctx, u, acct); err != nil || len(now) > 0 {
						return err
					}
				}
				cctx, cancel := c.call(ctx)
				defer cancel()
				var err error
				got, err = c.accountsClient().SetAssociation(cctx, &loomv1.SetAssociationRequest{Parent: c.projectName(), Association: a, CreateOnly: true})
				if status.Code(err) == codes.AlreadyExists {
					// Added by another call since the list: left as it
					// is, as an association that was there.
					return nil
				}
				return err
			})
			if err != nil {
				return err
			}
			if got == nil {
				continue
			}
			if got.GetDefaultAccount() {
				defaults[u] = acct
			}
			done = append(done, added{u, acct})
		}
	}
	if len(done) == 0 {
		fmt.Fprintln(c.stdout, " Nothing new added.")
		return &Error{Code: 1}
	}
	if out.quiet {
		return nil
	}
	var b strings.Builder
	b.WriteString(" Adding User(s)\n")
	for _, u := range names {
		fmt.Fprintf(&b, "  %s\n", u)
	}
	b.WriteString(" Settings =\n")
	fmt.Fprintf(&b, "  Default Account = %s\n", defaults[names[0]])
	b.WriteString(" Associations =\n")
	for _, d := range done {
		fmt.Fprintf(&b, "  U = %-9.9s A = %-10.10s C = %-10.10s\n", d.user, d.account, c.env.Project)
	}
	if l := set.lines(); len(l) > 0 {
		b.WriteString(" Non Default Settings\n")
		b.WriteString(strings.Join(l, "\n") + "\n")
	}
	fmt.Fprint(c.stdout, b.String())
	return nil
}

func (c *cmd) sacctmgrModify(ctx context.Context, args []string, out sacctmgrOut) error {
	if len(args) > 0 && sacctmgrEntity(args[0]) == "account" {
		return c.sacctmgrModifyAccount(ctx, args[1:], out)
	}
	if len(args) == 0 || sacctmgrEntity(args[0]) != "user" {
		return sacctmgrFail("No valid entity in modify command\nInput line must include \"User\" or \"Account\"")
	}
	var names, accounts []string
	var set assocSettings
	setting := false
	for _, s := range parseSacctmgrSpecs(args[1:]) {
		switch {
		case s.bare && strings.EqualFold(s.value, "where"):
			setting = false
		case s.bare && strings.EqualFold(s.value, "set"):
			setting = true
		case setting:
			ok, err := set.parse(s)
			if err != nil {
				return err
			}
			if !ok {
				return sacctmgrFail(" Unknown option: %s\n Use keyword 'where' to modify condition", s.raw)
			}
		case s.bare || s.key == "name" || s.key == "names" || word(s.key, "users", 1):
			names = append(names, splitList(strings.ToLower(s.value))...)
		case word(s.key, "accounts", 3) || s.key == "acct":
			accounts = append(accounts, splitList(strings.ToLower(s.value))...)
		case word(s.key, "clusters", 1):
		default:
			return sacctmgrFail(" Unknown condition: %s\n Use keyword 'set' to modify value", s.raw)
		}
	}
	if len(names) == 0 {
		return sacctmgrFail(" You didn't give me anything to modify (say which user: where name=NAME)")
	}
	if !set.changes() && set.defaultAccount == "" {
		return sacctmgrFail(" You didn't give me anything to set")
	}
	var modified []*loomv1.Association
	var defaulted []string
	for _, u := range names {
		assocs, err := c.listAssociations(ctx, u, "")
		if err != nil {
			return err
		}
		if set.defaultAccount != "" {
			var target *loomv1.Association
			for _, a := range assocs {
				if a.GetAccount() == set.defaultAccount {
					target = a
				}
			}
			if target == nil {
				return sacctmgrFail(" User %s does not have an association with account %s; add it first (sacctmgr add user %s account=%s)",
					u, set.defaultAccount, u, set.defaultAccount)
			}
			if !target.GetDefaultAccount() {
				if err := c.setAssociation(ctx, target, func(a *loomv1.Association) { a.DefaultAccount = true }); err != nil {
					return err
				}
				defaulted = append(defaulted, u)
			}
		}
		if !set.changes() {
			continue
		}
		for _, a := range assocs {
			if !inList(accounts, a.GetAccount()) {
				continue
			}
			// SetAssociation replaces the association: every value it
			// holds is sent again, changed or not; but not default_account,
			// which DefaultAccount= above may have moved since the read (the
			// gateway keeps the user's default as it stands).
			next := a
			if err := c.setAssociation(ctx, a, func(a *loomv1.Association) { set.apply(a); a.DefaultAccount = false; next = a }); err != nil {
				return err
			}
			modified = append(modified, next)
		}
	}
	if len(modified) == 0 && len(defaulted) == 0 {
		fmt.Fprintln(c.stdout, " Nothing modified")
		return &Error{Code: 1}
	}
	if out.quiet {
		return nil
	}
	var b strings.Builder
	if len(defaulted) > 0 {
		b.WriteString(" Modified users...\n")
		for _, u := range defaulted {
			fmt.Fprintf(&b, "  %s\n", u)
		}
	}
	if len(modified) > 0 {
		b.WriteString(" Modified user associations...\n")
		for _, a := range modified {
			fmt.Fprintf(&b, "  C = %-10.10s A = %-10.10s U = %-9.9s\n", c.env.Project, a.GetAccount(), a.GetUser())
		}
	}
	fmt.Fprint(c.stdout, b.String())
	return nil
}

// sacctmgrModifyAccount is modify account [where] name=A[,B] set
// [Description=] [Organization=] [Parent=] [Fairshare=]: each account's
// fields named, the others kept (UpdateAccount with their mask).
func (c *cmd) sacctmgrModifyAccount(ctx context.Context, args []string, out sacctmgrOut) error {
	var names, mask []string
	want := &loomv1.Account{}
	setting := false
	for _, s := range parseSacctmgrSpecs(args) {
		switch {
		case s.bare && strings.EqualFold(s.value, "where"):
			setting = false
		case s.bare && strings.EqualFold(s.value, "set"):
			setting = true
		case setting && word(s.key, "description", 1):
			want.Description, mask = s.value, append(mask, "description")
		case setting && word(s.key, "organization", 1):
			want.Organization, mask = s.value, append(mask, "organization")
		case setting && s.key == "parent":
			want.ParentAccount, mask = strings.ToLower(s.value), append(mask, "parent_account")
		case setting && (s.key == "fairshare" || s.key == "share" || s.key == "shares"):
			n, err := sacctmgrInt("Fairshare", s.value)
			if err != nil {
				return err
			}
			want.Fairshare, mask = n, append(mask, "fairshare")
		case setting && s.key == "grptres":
			t, err := sacctmgrTRES("GrpTRES", s.value)
			if err != nil {
				return err
			}
			// Each TRES named is one path: the others are kept.
			want.GrpTres = slurmspec.TRESFromProto(want.GetGrpTres()).With(t).Proto()
			for _, st := range t {
				path := map[string]string{"cpu": "grp_tres.cpu", "mem": "grp_tres.mem_mb", "node": "grp_tres.node", "gres/gpu": "grp_tres.gpu"}[st.Name]
				if !slices.Contains(mask, path) {
					mask = append(mask, path)
				}
			}
		case setting:
			return sacctmgrFail(" Unknown option: %s\n Use keyword 'where' to modify condition", s.raw)
		case s.bare || s.key == "name" || s.key == "names" || word(s.key, "accounts", 3):
			names = append(names, splitList(strings.ToLower(s.value))...)
		case word(s.key, "clusters", 1):
		default:
			return sacctmgrFail(" Unknown condition: %s\n Use keyword 'set' to modify value", s.raw)
		}
	}
	if len(names) == 0 {
		return sacctmgrFail(" You didn't give me anything to modify (say which account: where name=NAME)")
	}
	if len(mask) == 0 {
		return sacctmgrFail(" You didn't give me anything to set")
	}
	var modified []*loomv1.Account
	for _, n := range names {
		a := proto.Clone(want).(*loomv1.Account)
		a.Name = c.projectName() + "/accounts/" + n
		var got *loomv1.Account
		// The gateway reads the account again on each call: the mask
		// names what changes.
		err := c.retryChanged("modifying account "+n, func(bool) error {
			cctx, cancel := c.call(ctx)
			defer cancel()
			var err error
			got, err = c.accountsClient().UpdateAccount(cctx, &loomv1.UpdateAccountRequest{Account: a, UpdateMask: &fieldmaskpb.FieldMask{Paths: mask}})
			return err
		})
		if err != nil {
			return err
		}
		modified = append(modified, got)
	}
	if out.quiet {
		return nil
	}
	// As Slurm's: the accounts' own fields, then their associations'.
	var b strings.Builder
	if slices.Contains(mask, "description") || slices.Contains(mask, "organization") {
		b.WriteString(" Modified accounts...\n")
		for _, a := range modified {
			fmt.Fprintf(&b, "  %s\n", shortName(a.GetName()))
		}
	}
	if slices.Contains(mask, "parent_account") || slices.Contains(mask, "fairshare") ||
		slices.ContainsFunc(mask, func(p string) bool { return strings.HasPrefix(p, "grp_tres") }) {
		b.WriteString(" Modified account associations...\n")
		for _, a := range modified {
			fmt.Fprintf(&b, "  C = %-10.10s A = %-20.20s of %s\n", c.env.Project, shortName(a.GetName()), a.GetParentAccount())
		}
	}
	fmt.Fprint(c.stdout, b.String())
	return nil
}

// sacctmgrDelete is delete account NAME[,NAME] (each without sub-accounts,
// users or active jobs) and delete user NAME[,NAME] [account=A[,A]] (the
// user's associations with those accounts, all of them without one; the
// default account last, so that it goes only with the others).
func (c *cmd) sacctmgrDelete(ctx context.Context, args []string, out sacctmgrOut) error {
	entity := ""
	if len(args) > 0 {
		entity = sacctmgrEntity(args[0])
	}
	if entity != "account" && entity != "user" {
		return sacctmgrFail("No valid entity in delete command\nInput line must include \"User\" or \"Account\"")
	}
	var names, accounts []string
	for _, s := range parseSacctmgrSpecs(args[1:]) {
		switch {
		case s.bare && strings.EqualFold(s.value, "where"):
		case s.bare || s.key == "name" || s.key == "names" || entity == "user" && word(s.key, "users", 1) || entity == "account" && word(s.key, "accounts", 3):
			names = append(names, splitList(strings.ToLower(s.value))...)
		case entity == "user" && (word(s.key, "accounts", 3) || s.key == "acct"):
			accounts = append(accounts, splitList(strings.ToLower(s.value))...)
		case word(s.key, "clusters", 1):
		case s.bare && strings.EqualFold(s.value, "set"):
			return sacctmgrFail(" Can't set anything with delete; use modify")
		default:
			return sacctmgrFail(" Unknown condition: %s", s.raw)
		}
	}
	if len(names) == 0 {
		return sacctmgrFail(" No conditions given to delete: say which %s (where name=NAME)", entity)
	}
	var b strings.Builder
	if entity == "account" {
		b.WriteString(" Deleting accounts...\n")
		for _, n := range names {
			err := c.retryChanged("deleting account "+n, func(bool) error {
				cctx, cancel := c.call(ctx)
				defer cancel()
				_, err := c.accountsClient().DeleteAccount(cctx, &loomv1.DeleteAccountRequest{Name: c.projectName() + "/accounts/" + n})
				return err
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, "  %s\n", n)
		}
	} else {
		var deleted []*loomv1.Association
		for _, u := range names {
			assocs, err := c.listAssociations(ctx, u, "")
			if err != nil {
				return err
			}
			// The default account last: the gateway refuses it while
			// the user has others.
			slices.SortStableFunc(assocs, func(x, y *loomv1.Association) int {
				return cmp.Compare(boolInt(x.GetDefaultAccount()), boolInt(y.GetDefaultAccount()))
			})
			for _, a := range assocs {
				if len(accounts) > 0 && !inList(accounts, a.GetAccount()) {
					continue
				}
				if err := c.deleteAssociation(ctx, a); err != nil {
					if len(deleted) > 0 && !out.quiet {
						// Say what this command did delete before it stopped.
						b.WriteString(" Deleting user associations...\n")
						for _, d := range deleted {
							fmt.Fprintf(&b, "  C = %-10.10s A = %-10.10s U = %-9.9s\n", c.env.Project, d.GetAccount(), d.GetUser())
						}
						fmt.Fprint(c.stdout, b.String())
					}
					return err
				}
				deleted = append(deleted, a)
			}
		}
		if len(deleted) == 0 {
			fmt.Fprintln(c.stdout, " Nothing deleted")
			return &Error{Code: 1}
		}
		b.WriteString(" Deleting user associations...\n")
		for _, a := range deleted {
			fmt.Fprintf(&b, "  C = %-10.10s A = %-10.10s U = %-9.9s\n", c.env.Project, a.GetAccount(), a.GetUser())
		}
	}
	if !out.quiet {
		fmt.Fprint(c.stdout, b.String())
	}
	return nil
}

// deleteAssociation deletes the association a as this command read it
// (its etag sent: "delete what I saw"). When the gateway answers that
// something changed meanwhile (Aborted), it reads the association again:
// the same values (the conflict was elsewhere: the user's default account
// or other associations) are deleted once more with the same etag; new
// values, set by another admin since this command read them, are not
// deleted: the command says so and how to go on.
func (c *cmd) deleteAssociation(ctx context.Context, a *loomv1.Association) error {
	what := fmt.Sprintf("deleting user %s from account %s", a.GetUser(), a.GetAccount())
	return c.retryChanged(what, func(again bool) error {
		if again {
			now, err := c.listAssociations(ctx, a.GetUser(), a.GetAccount())
			if err != nil {
				return err
			}
			if len(now) == 0 {
				return c.errorf("%s: the association was deleted meanwhile by another call; nothing more to delete", what)
			}
			if now[0].GetEtag() != a.GetEtag() {
				return c.errorf("%s: the association was changed by another admin after this command read it; it was not deleted. "+
					"Look at it now (sacctmgr show assoc user=%s account=%s) and run the delete again if it should still go",
					what, a.GetUser(), a.GetAccount())
			}
		}
		cctx, cancel := c.call(ctx)
		defer cancel()
		_, err := c.accountsClient().DeleteAssociation(cctx, &loomv1.DeleteAssociationRequest{Parent: c.projectName(), User: a.GetUser(), Account: a.GetAccount(), Etag: a.GetEtag()})
		return err
	})
}

// boolInt is 1 for true: an order that puts false first.
func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// setAssociation sends the association read as a, changed by change (on a
// copy), for modify user, with the etag it was read with: the gateway
// writes it only while the association is still as read, so that another
// call's write since (another admin's QOS+=) is not overwritten with the
// values read before it. When the gateway answers that it changed
// meanwhile, it reads the association again and sends it changed again,
// once (retryChanged): what another call set meanwhile is kept.
func (c *cmd) setAssociation(ctx context.Context, a *loomv1.Association, change func(*loomv1.Association)) error {
	return c.retryChanged(fmt.Sprintf("modifying user %s in account %s", a.GetUser(), a.GetAccount()), func(again bool) error {
		cur := a
		if again {
			now, err := c.listAssociations(ctx, a.GetUser(), a.GetAccount())
			if err != nil {
				return err
			}
			if len(now) == 0 {
				return c.errorf("modifying user %s in account %s: the association was deleted meanwhile", a.GetUser(), a.GetAccount())
			}
			cur = now[0]
		}
		next := proto.Clone(cur).(*loomv1.Association)
		change(next)
		cctx, cancel := c.call(ctx)
		defer cancel()
		_, err := c.accountsClient().SetAssociation(cctx, &loomv1.SetAssociationRequest{Parent: c.projectName(), Association: next})
		return err
	})
}

// retryChanged runs write, and once more when the gateway answers Aborted:
// what the call was decided on changed meanwhile (another sacctmgr, or
// another gateway, wrote it between the gateway's read and its write), and
// nothing was written. write is then called with again true and reads
// again what it decided on. A second Aborted, as any other error, is the
// command's error (what: what it was doing).
func (c *cmd) retryChanged(what string, write func(again bool) error) error {
	err := write(false)
	if status.Code(err) == codes.Aborted {
		err = write(true)
	}
	var e *Error
	if err == nil || errors.As(err, &e) {
		return err
	}
	return c.rpcError(what, err)
}
