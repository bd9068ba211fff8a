package slurmspec

import "strings"

// PatternFields are the values of a filename pattern's % fields (sbatch
// and srun --output/--error). The step's fields (%s, %t, %n, %J) stay as
// written when left empty (a batch script's pattern has no task); the
// others expand to what they hold, empty or not.
type PatternFields struct {
	// JobID is %j; ArrayJobID %A (the job id when not an array task);
	// ArrayTaskID %a (4294967294, as Slurm prints it, for no task).
	JobID, ArrayJobID, ArrayTaskID string
	// Name is %x, User %u, Node %N (a hostname).
	Name, User, Node string
	// StepID is %s (and %J is JobID.StepID), TaskID %t (a task's rank),
	// NodeID %n (a node's index in the step).
	StepID, TaskID, NodeID string
}

// MaxPatternWidth is the widest a pattern's zero-padding makes a field: a
// wider width is read as this one, as Slurm's MAX_WIDTH (%20j is %10j).
// Without it one job's --output could make whoever expands it allocate
// gigabytes.
const MaxPatternWidth = 10

// ExpandPattern resolves Slurm's filename pattern fields in p (see
// PatternFields), %% as a percent sign; a number between % and a numeric
// field's letter zero-pads it (%5j) to at most MaxPatternWidth. Unknown
// fields, and step fields f leaves empty, stay as they are.
func ExpandPattern(p string, f PatternFields) string {
	if !strings.Contains(p, "%") {
		return p
	}
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c != '%' || i+1 >= len(p) {
			b.WriteByte(c)
			continue
		}
		j := i + 1
		for j < len(p) && p[j] >= '0' && p[j] <= '9' {
			j++
		}
		if j >= len(p) {
			b.WriteString(p[i:])
			break
		}
		width := 0
		for _, d := range p[i+1 : j] {
			width = min(width*10+int(d-'0'), MaxPatternWidth)
		}
		var v string
		numeric, step := true, false
		switch p[j] {
		case '%':
			b.WriteByte('%')
			i = j
			continue
		case 'j':
			v = f.JobID
		case 'A':
			v = f.ArrayJobID
		case 'a':
			v = f.ArrayTaskID
		case 's':
			v, step = f.StepID, true
		case 't':
			v, step = f.TaskID, true
		case 'n':
			v, step = f.NodeID, true
		case 'J':
			if f.StepID != "" {
				v = f.JobID + "." + f.StepID
			}
			numeric, step = false, true
		case 'x':
			v, numeric = f.Name, false
		case 'u':
			v, numeric = f.User, false
		case 'N':
			v, numeric = f.Node, false
		default:
			step = true // unknown: as written
		}
		if step && v == "" {
			b.WriteString(p[i : j+1])
			i = j
			continue
		}
		if numeric && width > len(v) {
			v = strings.Repeat("0", width-len(v)) + v
		}
		b.WriteString(v)
		i = j
	}
	return b.String()
}

// MaxPatternIDDigits is the most digits ExpandedBound assumes of a
// pattern's numeric fields (%j, %A, %a, %s, %t, %n): a uint64's.
const MaxPatternIDDigits = 20

// ExpandedBound returns the most bytes p can expand to (ExpandPattern),
// whatever the job it is expanded for, given names (%x, %u, %N) of at most
// nameMax bytes. A pattern is short, but each name field in it may add
// nameMax bytes: 2,048 %x in a 4 KiB --output made a 512 KiB path, which
// the start record carried to the agent. It expands p once with a marker
// byte per kind of field (a pattern holds no control characters) and
// counts them.
func ExpandedBound(p string, nameMax int) int {
	const id, name = "\x01", "\x02"
	e := ExpandPattern(p, PatternFields{JobID: id, ArrayJobID: id, ArrayTaskID: id, StepID: id, TaskID: id, NodeID: id,
		Name: name, User: name, Node: name})
	return len(e) + strings.Count(e, id)*(MaxPatternIDDigits-1) + strings.Count(e, name)*(nameMax-1)
}
