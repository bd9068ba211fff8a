package authz

import (
	"fmt"
	"sort"
	"strings"
)

// Markdown renders Table as the Markdown table docs/security.md shows (a
// test keeps the two equal): one row per method, sorted by method, with
// who may call it, the request field whose project (or user, or job) is
// checked, and what a workload and a node may do with it.
func Markdown() string {
	methods := make([]string, 0, len(Table))
	for m := range Table {
		methods = append(methods, m)
	}
	sort.Strings(methods)
	var b strings.Builder
	b.WriteString("| method | who may call | checked on | workload | node |\n")
	b.WriteString("|---|---|---|---|---|\n")
	for _, m := range methods {
		r := Table[m]
		fieldText := "—"
		if r.Field != "" {
			fieldText = "`" + r.Field + "`"
		}
		node := "no"
		if r.Node || r.Access == Public || r.Access == Authenticated {
			node = "yes"
		}
		workload := r.Workload.String()
		if r.Access == Public || r.Access == Authenticated {
			workload = "yes"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", strings.TrimPrefix(m, "/"), r.Access, fieldText, workload, node)
	}
	return b.String()
}
