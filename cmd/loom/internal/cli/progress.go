package cli

import (
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// isTerminal says whether w is a character device (a terminal) that can
// redraw a line in place. TERM=dumb terminals cannot.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	return os.Getenv("TERM") != "dumb"
}

// barWidth is the number of cells of a progress bar.
const barWidth = 24

// fractionPattern finds "12 of 16" in an operation's progress message, the
// form the gateway and provisioner write ("12 of 16 nodes ready").
var fractionPattern = regexp.MustCompile(`(\d+) of (\d+)`)

// progressView shows a long-running operation's progress. On a terminal it is
// one line redrawn in place, "[████████░░░░] 12/16 nodes ready"; elsewhere
// (a pipe, a log file, a test) it writes one plain line each time the
// progress message changes, so that logs stay readable.
type progressView struct {
	w      io.Writer
	tty    bool
	indent string
	last   string // the last message shown
	open   bool   // a redrawn line is on screen without its newline
}

// show displays op's progress if it changed. When op is done and carries its
// cluster, the bar is completed from the cluster's status, so that the
// final line agrees with the result.
func (p *progressView) show(op *loomv1.Operation) {
	msg := op.GetMetadata().GetProgress()
	if op.GetDone() && p.tty {
		if st := op.GetCluster().GetStatus(); st.GetTotalNodes() > 0 && !fractionPattern.MatchString(msg) {
			msg = fmt.Sprintf("%d of %d nodes ready", st.GetReadyNodes(), st.GetTotalNodes())
		}
	}
	if msg == "" || msg == p.last {
		return
	}
	p.last = msg
	if !p.tty {
		fmt.Fprintf(p.w, "%s%s\n", p.indent, msg)
		return
	}
	// \r returns to the line's start, ESC[K clears what a longer previous
	// line left behind.
	fmt.Fprintf(p.w, "\r\x1b[K%s%s", p.indent, progressLine(msg))
	p.open = true
}

// finish ends a redrawn line, so that what follows starts on its own line.
func (p *progressView) finish() {
	if p.open {
		fmt.Fprintln(p.w)
		p.open = false
	}
}

// progressLine renders a progress message with a bar when it holds a
// fraction: "12 of 16 nodes ready" → "[██████████████████░░░░░░] 12/16 nodes
// ready"; text before the fraction stays in front ("pool gpu: [...] 3/5 ...").
// A message without a fraction is shown as it is.
func progressLine(msg string) string {
	m := fractionPattern.FindStringSubmatchIndex(msg)
	if m == nil {
		return msg
	}
	done, _ := strconv.Atoi(msg[m[2]:m[3]])
	total, _ := strconv.Atoi(msg[m[4]:m[5]])
	prefix := strings.TrimSpace(msg[:m[0]])
	rest := strings.TrimSpace(msg[m[1]:])
	var b strings.Builder
	if prefix != "" {
		b.WriteString(prefix + " ")
	}
	b.WriteString(bar(done, total, barWidth))
	fmt.Fprintf(&b, " %d/%d", done, total)
	if rest != "" {
		b.WriteString(" " + rest)
	}
	return b.String()
}

// bar draws done of total as width cells, full cells first.
func bar(done, total, width int) string {
	full := 0
	if total > 0 {
		full = min(width, max(0, done*width/total))
	}
	return "[" + strings.Repeat("█", full) + strings.Repeat("░", width-full) + "]"
}
