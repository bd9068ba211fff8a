package slurmcli

import (
	"fmt"
	"strings"
)

// fieldsOut is how the accounting-style tools (sacct, sacctmgr, sshare)
// print a table, as Slurm's print_fields does.
type fieldsOut struct {
	// parsable: 0 fixed-width columns; 1 delim after every cell (-p); 2
	// delim between cells (-P).
	parsable int
	delim    string
	noHeader bool
	// rightHeaders right-aligns every header, a left-aligned column's too
	// (sshare's Account); else a header is aligned as its cells.
	rightHeaders bool
}

// writeFields writes rows (a value per column) under the columns' names:
// fixed width, each cell cut and padded to its column's width (sacctCell:
// a negative width left-aligns) under a dashed rule, or delimited.
func (o fieldsOut) writeFields(b *strings.Builder, names []string, widths []int, rows [][]string) {
	line := func(vals []string, header bool) {
		for i, v := range vals {
			w := widths[i]
			abs := max(w, -w)
			switch {
			case o.parsable == 2 && i == len(vals)-1:
				b.WriteString(v)
			case o.parsable > 0:
				b.WriteString(v + o.delim)
			case header && w < 0 && !o.rightHeaders:
				fmt.Fprintf(b, "%-*.*s ", abs, abs, v)
			case header:
				fmt.Fprintf(b, "%*.*s ", abs, abs, v)
			default:
				sacctCell(b, v, w)
			}
		}
		b.WriteString("\n")
	}
	if !o.noHeader {
		line(names, true)
		if o.parsable == 0 {
			for _, w := range widths {
				b.WriteString(strings.Repeat("-", max(w, -w)) + " ")
			}
			b.WriteString("\n")
		}
	}
	for _, r := range rows {
		line(r, false)
	}
}
